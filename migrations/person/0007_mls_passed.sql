-- The handshake log is pruned by what every member has passed, or by age
-- (store/mls_log.go): each member client's epoch, the newest it has shown
-- it holds (0 for members from before, so they hold the log until the
-- age bound), and the commits by time, for the age bound.
ALTER TABLE mls_members ADD COLUMN passed INTEGER NOT NULL DEFAULT 0;
CREATE INDEX mls_commits_created_at ON mls_commits(created_at);
