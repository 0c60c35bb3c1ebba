-- A person's media (issue 11): one row per file under their folder's
-- media/<id>. The file is written, fsynced and renamed into place before
-- its row is committed, so a row never points to a missing file; a file
-- without a row (a crash between the two) is removed at the person's next
-- use of media (store/media.go). Sizes are bytes, times unix milliseconds.

CREATE TABLE media (
	id           TEXT PRIMARY KEY,
	size         INTEGER NOT NULL,
	sha256       TEXT NOT NULL,
	content_type TEXT NOT NULL,
	created_at   INTEGER NOT NULL
) WITHOUT ROWID;
