-- Idempotency keys (issue 25): one row per key a person's phone sent with a
-- write (POST /moments, POST /media), committed in the same transaction as
-- the write it protects, so a retry after any crash finds it. hash is the
-- sha256 of what was asked (route and body), answer the JSON of the first
-- 201. Kept 24 hours and at most the newest 1,000 per person (store/idem.go).
-- Times are unix milliseconds.

CREATE TABLE idempotency (
	key        TEXT PRIMARY KEY,
	hash       BLOB NOT NULL,
	answer     BLOB NOT NULL,
	created_at INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX idempotency_time ON idempotency(created_at);
