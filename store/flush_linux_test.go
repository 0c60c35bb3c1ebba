package store

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nah-app/nah/internal/testdisk"
)

// TestFlushBacksOff: a flush of newest times that fails on a full disk is
// retried, and logged, one, two, four... seconds apart rather than every
// second; a write that succeeds once space is back flushes at once.
func TestFlushBacksOff(t *testing.T) {
	dir := testdisk.Mount(t, "8m")
	var logs lockedBuffer
	s := MustOpen(t, Config{Dir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := context.Background()
	ann := mustPerson(t, s, "ann")
	if _, err := s.CreateMoment(ctx, ann.ID, []byte("x")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // flushed
	testdisk.Fill(t, dir)
	s.markDirty(ann.ID, 1<<42, 1)
	time.Sleep(3500 * time.Millisecond)
	if n := logs.count("flush newest times"); n < 1 || n > 2 {
		t.Errorf("%d flush failures logged in 3.5 s, want 1 or 2 (1 s, then 2 s later)", n)
	}
	testdisk.Free(t, dir)
	if _, err := s.CreateMoment(ctx, ann.ID, []byte("space is back")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	for {
		var newest int64
		if err := s.r.QueryRowContext(ctx, `SELECT newest_at FROM people WHERE id = ?`, ann.ID).Scan(&newest); err != nil {
			t.Fatal(err)
		}
		if newest == 1<<42 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("newest times not flushed within a second of space coming back")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := logs.count("flush newest times recovered"); n != 1 {
		t.Errorf("recovery logged %d times, want once", n)
	}
}
