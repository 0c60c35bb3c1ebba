-- The connections a person had on the server they were imported from, by
-- handle: connections are mutual consent and are not recreated, but the
-- console shows which of these handles have an account here, so that the
-- operator can help them ask again. At most 150 a person, as connections.
CREATE TABLE former_connections (
	person_id    TEXT NOT NULL REFERENCES people(id) ON DELETE CASCADE,
	handle       TEXT NOT NULL,
	connected_at TEXT NOT NULL,
	PRIMARY KEY (person_id, handle)
) WITHOUT ROWID;
