-- The two tables Litestream (backup/) makes in every database it watches,
-- made here with its exact statements: Litestream's own CREATE ... IF NOT
-- EXISTS is then a no-op, so the first time a file is watched costs no
-- write transaction (two commits, each with its fsync, under the write
-- lock every post to that file waits for). _litestream_seq forces a write
-- to the WAL when it is empty; _litestream_lock is only ever written in
-- transactions Litestream rolls back, to take the write lock.
CREATE TABLE IF NOT EXISTS _litestream_seq (id INTEGER PRIMARY KEY, seq INTEGER);
CREATE TABLE IF NOT EXISTS _litestream_lock (id INTEGER);
