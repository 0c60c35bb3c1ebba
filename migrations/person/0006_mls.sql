-- MLS: nah is the delivery service of each person's group, whose
-- audience is their own clients and their connections' (README, "End-to-end
-- encryption"). Everything of a person's group lives in their file; a
-- Welcome waits in the file of the client it is for. Bounds are in
-- store/mls.go. Times are unix milliseconds.

-- The person's MLS clients (phones, tablets), each with its signature key.
CREATE TABLE mls_clients (
	id            TEXT PRIMARY KEY,
	signature_key BLOB NOT NULL,
	name          TEXT NOT NULL,
	created_at    INTEGER NOT NULL
) WITHOUT ROWID;

-- KeyPackages not yet claimed (a claimed one is deleted in its claim), and
-- each client's last-resort one, which a claim hands out when none is left.
CREATE TABLE mls_key_packages (
	id          INTEGER PRIMARY KEY,
	client      TEXT NOT NULL,
	last_resort INTEGER NOT NULL,
	body        BLOB NOT NULL,
	created_at  INTEGER NOT NULL
);
CREATE INDEX mls_key_packages_client ON mls_key_packages(client, last_resort, id);

-- The person's one group, its members by leaf index, the member clients
-- whose Remove no commit has brought yet, and its commits by the epoch
-- each one makes (the newest mlsCommitsKept).
CREATE TABLE mls_group (
	one        INTEGER PRIMARY KEY CHECK (one = 1),
	group_id   BLOB NOT NULL,
	epoch      INTEGER NOT NULL,
	group_info BLOB,
	created_at INTEGER NOT NULL
);

CREATE TABLE mls_members (
	leaf   INTEGER PRIMARY KEY,
	client TEXT NOT NULL UNIQUE,
	person TEXT NOT NULL
);

CREATE TABLE mls_removals (
	client TEXT PRIMARY KEY,
	at     INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE mls_commits (
	epoch      INTEGER PRIMARY KEY,
	body       BLOB NOT NULL,
	created_at INTEGER NOT NULL
);

-- Welcomes for this person's clients, into others' groups or their own.
CREATE TABLE mls_inbox (
	id         INTEGER PRIMARY KEY,
	client     TEXT NOT NULL,
	group_of   TEXT NOT NULL,
	epoch      INTEGER NOT NULL,
	welcome    BLOB NOT NULL,
	created_at INTEGER NOT NULL
);
CREATE INDEX mls_inbox_client ON mls_inbox(client, id);

-- The key log: every client added or removed, a hash chain
-- (store/mls_keylog.go) whose head the server signs.
CREATE TABLE mls_key_log (
	pos           INTEGER PRIMARY KEY,
	kind          TEXT NOT NULL,
	client        TEXT NOT NULL,
	signature_key BLOB NOT NULL,
	at            INTEGER NOT NULL,
	hash          BLOB NOT NULL
);
