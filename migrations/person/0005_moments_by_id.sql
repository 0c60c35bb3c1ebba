-- Moments in the order of their ids (issue 22): an id begins with its
-- time in milliseconds (nah.MomentIDFrom: 48 bits, base32hex, so ids sort
-- as (created_at, id) do), and the primary key alone serves every page.
-- The (created_at, id) index was a third of the WAL a post wrote (15.0
-- against 9.2 KB a post, 16 writers on 1,000 files, FULL). An import
-- before this step did not tie a moment's time to its id: such a time
-- becomes the id's, so that both orders are one.

UPDATE moments SET created_at = t.at
FROM (SELECT id,
		(((instr('0123456789abcdefghijklmnopqrstuv', substr(id, 1, 1)) - 1) << 45)
			| ((instr('0123456789abcdefghijklmnopqrstuv', substr(id, 2, 1)) - 1) << 40)
			| ((instr('0123456789abcdefghijklmnopqrstuv', substr(id, 3, 1)) - 1) << 35)
			| ((instr('0123456789abcdefghijklmnopqrstuv', substr(id, 4, 1)) - 1) << 30)
			| ((instr('0123456789abcdefghijklmnopqrstuv', substr(id, 5, 1)) - 1) << 25)
			| ((instr('0123456789abcdefghijklmnopqrstuv', substr(id, 6, 1)) - 1) << 20)
			| ((instr('0123456789abcdefghijklmnopqrstuv', substr(id, 7, 1)) - 1) << 15)
			| ((instr('0123456789abcdefghijklmnopqrstuv', substr(id, 8, 1)) - 1) << 10)
			| ((instr('0123456789abcdefghijklmnopqrstuv', substr(id, 9, 1)) - 1) << 5)
			| ((instr('0123456789abcdefghijklmnopqrstuv', substr(id, 10, 1)) - 1) << 0)
		) >> 2 AS at FROM moments) AS t
WHERE moments.id = t.id AND moments.created_at IS NOT t.at;

DROP INDEX IF EXISTS moments_time;
