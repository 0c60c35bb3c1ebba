-- One person's file: their moments. Bodies are opaque.
-- Times are unix milliseconds.

CREATE TABLE moments (
	id         TEXT PRIMARY KEY,
	created_at INTEGER NOT NULL,
	body       BLOB NOT NULL
) WITHOUT ROWID;

-- The feed reads keys first: (created_at, id) through this index alone
-- (the table's key id is part of every index entry), bodies only for the page.
CREATE INDEX moments_time ON moments(created_at, id);
