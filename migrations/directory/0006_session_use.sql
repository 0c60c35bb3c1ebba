-- Sessions end (store/sessions.go): a person keeps at most 10, the one used
-- least recently dropped for a new one, and a session unused for 90 days
-- expires. used_at is when the token last signed a request, kept to the
-- hour (unix ms); device is the User-Agent it signed in with, for the
-- console's list of a person's phones.
ALTER TABLE sessions ADD COLUMN used_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN device TEXT NOT NULL DEFAULT '';
UPDATE sessions SET used_at = created_at;
CREATE INDEX sessions_used ON sessions(used_at);
