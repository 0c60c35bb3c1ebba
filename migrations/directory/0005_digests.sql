-- Daily digests and push devices.
--
-- digests: a person's digest time and zone, and the state that makes each
-- day's digest happen exactly once. Times are unix ms.
--   minute         local minute of the day, 0..1439, read in timezone
--   updated_at     when the settings last changed: a slot before it is not owed
--   last_digest_at the slot (the instant of the local digest minute) last
--                  claimed; written before any push of that slot is sent
--   done_at        the slot whose pushes have all been answered or given up;
--                  a claimed slot that is not done was cut off by a crash
--   counted_from   the start of the claimed slot's window: it counts moments
--                  in (counted_from, last_digest_at]
CREATE TABLE digests (
	person_id      TEXT PRIMARY KEY REFERENCES people(id) ON DELETE CASCADE,
	minute         INTEGER NOT NULL,
	timezone       TEXT NOT NULL,
	enabled        INTEGER NOT NULL,
	updated_at     INTEGER NOT NULL,
	last_digest_at INTEGER,
	done_at        INTEGER,
	counted_from   INTEGER
) WITHOUT ROWID;

-- A phone's push token is a secret, but the relay needs it whole, so it is
-- stored as given (the directory is private to the server's user) and
-- never logged or shown. One token is one phone: whoever registers it last
-- owns it. created_at orders a person's devices, the oldest dropped past 10.
CREATE TABLE devices (
	token      TEXT PRIMARY KEY,
	person_id  TEXT NOT NULL REFERENCES people(id) ON DELETE CASCADE,
	platform   TEXT NOT NULL,
	created_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX devices_person ON devices(person_id, created_at);
