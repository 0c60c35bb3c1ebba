-- A deleted person keeps their row, and so their handle, until the purge:
-- deleted_at is when they were deleted (unix ms), NULL for everyone else.
-- Their folder waits under deleted/ meanwhile, so that an operator can
-- undo the deletion.
ALTER TABLE people ADD COLUMN deleted_at INTEGER;
