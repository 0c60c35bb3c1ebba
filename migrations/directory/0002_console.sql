-- The admin console: operators (separate from people), their sessions,
-- one-time links, persisted settings and password-reset links for people.

CREATE TABLE admins (
	id            TEXT PRIMARY KEY,
	name          TEXT NOT NULL UNIQUE,
	password_hash TEXT NOT NULL,
	created_at    INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE admin_sessions (
	token_hash BLOB PRIMARY KEY,
	admin_id   TEXT NOT NULL REFERENCES admins(id) ON DELETE CASCADE,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL
) WITHOUT ROWID;

-- One-time links: kind 'admin' creates an admin, kind 'reset' sets a
-- person's password. Stored hashed, like every secret.
CREATE TABLE links (
	token_hash BLOB PRIMARY KEY,
	kind       TEXT NOT NULL,
	person_id  TEXT REFERENCES people(id) ON DELETE CASCADE,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	used_at    INTEGER
) WITHOUT ROWID;

CREATE TABLE settings (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
) WITHOUT ROWID;

-- A count of each person's moments for the console, kept by adding each
-- process's deltas so that two processes on one directory stay right.
ALTER TABLE people ADD COLUMN moments INTEGER NOT NULL DEFAULT 0;
