-- The directory database: accounts, sessions, codes and connections.
-- Times are unix milliseconds. Secrets (tokens, codes) are stored as SHA-256.

CREATE TABLE meta (
	key   TEXT PRIMARY KEY,
	value BLOB NOT NULL
) WITHOUT ROWID;

CREATE TABLE people (
	id            TEXT PRIMARY KEY,
	handle        TEXT NOT NULL UNIQUE,
	password_hash TEXT NOT NULL,
	created_at    INTEGER NOT NULL,
	disabled      INTEGER NOT NULL DEFAULT 0,
	-- newest_at is a hint loaded at start; the person's own file is the truth.
	newest_at     INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

CREATE TABLE sessions (
	token_hash BLOB PRIMARY KEY,
	person_id  TEXT NOT NULL REFERENCES people(id) ON DELETE CASCADE,
	created_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX sessions_person ON sessions(person_id);

CREATE TABLE join_codes (
	code_hash  BLOB PRIMARY KEY,
	hint       TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	used_by    TEXT,
	used_at    INTEGER,
	revoked_at INTEGER
) WITHOUT ROWID;

CREATE TABLE invites (
	code_hash  BLOB PRIMARY KEY,
	person_id  TEXT NOT NULL REFERENCES people(id) ON DELETE CASCADE,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	used_by    TEXT,
	used_at    INTEGER
) WITHOUT ROWID;
CREATE INDEX invites_person ON invites(person_id);

-- Each connection is two rows, one per side, so "my connections" is one
-- index range and the cap is one count.
CREATE TABLE connections (
	person_id  TEXT NOT NULL REFERENCES people(id) ON DELETE CASCADE,
	other_id   TEXT NOT NULL REFERENCES people(id) ON DELETE CASCADE,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (person_id, other_id)
) WITHOUT ROWID;
CREATE INDEX connections_other ON connections(other_id);
