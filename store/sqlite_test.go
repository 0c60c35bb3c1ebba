package store

import (
	"context"
	"database/sql"
	"runtime"
	"testing"

	sqlite "modernc.org/sqlite"
)

// TestPragmasThatCarryAPromise checks, on every kind of connection the store
// opens, the pragmas that dsn sets for a reason a test can see nowhere else:
// synchronous as Config.Sync says (FULL: an acknowledged moment survives
// power loss; NORMAL: a crash of the process), WAL (readers never block the
// writer), foreign keys, and a busy timeout (a second writer waits instead
// of failing). Weakening any of them in dsn, or losing NAH_SYNC's choice on
// the way to a connection, passes every other test, so it must fail this one.
func TestPragmasThatCarryAPromise(t *testing.T) {
	for _, c := range []struct {
		sync Sync
		want int // PRAGMA synchronous: 1 NORMAL, 2 FULL
	}{{SyncFull, 2}, {SyncNormal, 1}} {
		t.Run(c.sync.String(), func(t *testing.T) {
			ctx := context.Background()
			s := MustOpen(t, Config{Sync: c.sync})

			checkPragmas(t, "directory writer", s.w, 1, c.want)
			checkPragmas(t, "directory readers", s.r, directoryReaders, c.want)

			for _, handle := range []string{"ann", "bob"} {
				p := mustPerson(t, s, handle)
				f, err := s.files.Acquire(ctx, p.ID, false)
				if err != nil {
					t.Fatal(err)
				}
				checkPragmas(t, "person file of "+handle, f.DB, 1, c.want)
				s.files.Release(f)
			}
		})
	}
	if _, err := Open(context.Background(), Config{Dir: t.TempDir(), Sync: 7}); err == nil {
		t.Error("Open took an unknown Sync")
	}
	// modernc commits with fsync unless told otherwise; SQLite's own Linux
	// builds use fdatasync, which a FULL commit needs and no more.
	if runtime.GOOS == "linux" && !sqlite.FdatasyncEnabled() {
		t.Error("SQLite commits with fsync, want fdatasync")
	}
}

// checkPragmas holds conns connections of db at once, so that each
// connection of a pool is checked and not the same one conns times.
func checkPragmas(t *testing.T, what string, db *sql.DB, conns, wantSync int) {
	t.Helper()
	ctx := context.Background()
	held := make([]*sql.Conn, conns)
	for i := range held {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatalf("%s: connection %d: %v", what, i, err)
		}
		defer c.Close()
		held[i] = c
	}
	for i, c := range held {
		var sync, fk, busy int
		var journal string
		for _, q := range []struct {
			pragma string
			into   any
		}{
			{"synchronous", &sync},
			{"journal_mode", &journal},
			{"foreign_keys", &fk},
			{"busy_timeout", &busy},
		} {
			if err := c.QueryRowContext(ctx, "PRAGMA "+q.pragma).Scan(q.into); err != nil {
				t.Fatalf("%s: connection %d: PRAGMA %s: %v", what, i, q.pragma, err)
			}
		}
		if sync != wantSync {
			t.Errorf("%s: connection %d: synchronous = %d, want %d", what, i, sync, wantSync)
		}
		if journal != "wal" {
			t.Errorf("%s: connection %d: journal_mode = %q, want wal", what, i, journal)
		}
		if fk != 1 {
			t.Errorf("%s: connection %d: foreign_keys = %d, want 1", what, i, fk)
		}
		if busy <= 0 {
			t.Errorf("%s: connection %d: busy_timeout = %d, want > 0", what, i, busy)
		}
	}
}

// TestReplicatedFilesAreNotAutoCheckpointed: with replication on, the
// writers of the directory and of person files never checkpoint by
// themselves (sqlite.go, dsn), so a WAL never starts again behind
// Litestream; without it they keep SQLite's default of 1,000 pages.
func TestReplicatedFilesAreNotAutoCheckpointed(t *testing.T) {
	for _, c := range []struct {
		name  string
		hooks testHooks
		want  int
	}{
		{"replicated", testHooks{Watch: func(context.Context, string) error { return nil }, Unwatch: func(string) error { return nil }}, 0},
		{"not replicated", testHooks{}, 1000},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := MustOpen(t, c.hooks.config(Config{}))
			p := mustPerson(t, s, "ann")
			f, err := s.files.Acquire(context.Background(), p.ID, false)
			if err != nil {
				t.Fatal(err)
			}
			defer s.files.Release(f)
			for what, db := range map[string]*sql.DB{"directory writer": s.w, "person file": f.DB} {
				var n int
				if err := db.QueryRow("PRAGMA wal_autocheckpoint").Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != c.want {
					t.Errorf("%s: wal_autocheckpoint = %d, want %d", what, n, c.want)
				}
			}
		})
	}
}
