package backup

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"
)

// Litestream carries a file's history on from the WAL generation (salts)
// its last LTX file was read from; a WAL started again while nobody
// watched would hide frames it never read, and the replica restores
// corrupt (README, Backups). So a take-up of a WAL of another generation
// empties it first, and Litestream starts the file afresh with a snapshot.

// walEmptyTimeout bounds the wait for readers of the file to finish
// before its WAL can be emptied; the app holds a read for a feed's few
// milliseconds, never longer.
const walEmptyTimeout = 5 * time.Second

// resumeCheck makes sure Litestream can carry db's history on from its WAL
// as the WAL is now, emptying the WAL when it cannot (above).
func resumeCheck(ctx context.Context, db *litestream.DB) error {
	salts, ok, err := walSalts(db.WALPath())
	if err != nil || !ok {
		return err // no WAL, or one without frames: nothing to mistake
	}
	last, err := lastSalts(db)
	if err != nil {
		return err
	}
	if last != nil && *last == salts {
		return nil // the same WAL the history stopped in
	}
	if err := emptyWAL(ctx, db.Path()); err != nil {
		return fmt.Errorf("empty the WAL before replication takes the file up: %w", err)
	}
	return nil
}

// walSalts reads the salts of the WAL at p; ok is false when there is no
// WAL or only its header.
func walSalts(p string) (salts [2]uint32, ok bool, err error) {
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return salts, false, nil
	} else if err != nil {
		return salts, false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return salts, false, err
	}
	var hdr [litestream.WALHeaderSize]byte
	if st.Size() <= litestream.WALHeaderSize {
		return salts, false, nil
	}
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return salts, false, err
	}
	return [2]uint32{binary.BigEndian.Uint32(hdr[16:]), binary.BigEndian.Uint32(hdr[20:])}, true, nil
}

// lastSalts reads the WAL salts of db's last local LTX file, nil when it
// has none (never replicated from here, or its local state was cleared).
func lastSalts(db *litestream.DB) (*[2]uint32, error) {
	minTXID, maxTXID, err := db.MaxLTX()
	if err != nil || maxTXID == 0 {
		return nil, err
	}
	f, err := os.Open(db.LTXPath(0, minTXID, maxTXID))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := ltx.NewDecoder(f)
	if err := dec.DecodeHeader(); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	h := dec.Header()
	return &[2]uint32{h.WALSalt1, h.WALSalt2}, nil
}

// emptyWAL checkpoints the WAL of database p into it and truncates it,
// through a connection of its own, waiting for readers to finish.
func emptyWAL(ctx context.Context, p string) error {
	db, err := sql.Open("sqlite", fmt.Sprintf("file:%s?_pragma=busy_timeout(%d)&_pragma=synchronous(FULL)", p, walEmptyTimeout.Milliseconds()))
	if err != nil {
		return err
	}
	defer db.Close()
	var busy, frames, done int
	if err := db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &frames, &done); err != nil {
		return err
	}
	if busy != 0 {
		return fmt.Errorf("%s: the WAL is still in use after %v", p, walEmptyTimeout)
	}
	return nil
}
