package store

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/internal/testutil"
)

// TestDeleteUndoPurge follows one person through deletion, undo, deletion
// again and the purge once the clock passes the grace: every moment comes
// back with the undo, connections do not, and after the purge no file name
// and no byte under the data directory holds the person's id.
func TestDeleteUndoPurge(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clock := testutil.NewClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	s, err := Open(ctx, Config{Dir: dir, Now: clock.Now, DeleteGrace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ann, bob := mustPerson(t, s, "ann"), mustPerson(t, s, "bob")
	if err := s.ImportConnections(ctx, [][2]string{{ann.ID, bob.ID}}, 1); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 5 {
		clock.Advance(time.Millisecond)
		m, err := s.CreateMoment(ctx, ann.ID, []byte{'a' + byte(i)})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, m.ID)
	}
	token, err := s.CreateSession(ctx, ann.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PersonForToken(ctx, token); err != nil { // cached now
		t.Fatal(err)
	}
	if _, err := s.CreateInvite(ctx, ann.ID); err != nil {
		t.Fatal(err)
	}

	if err := s.DeletePerson(ctx, ann.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PersonForToken(ctx, token); nah.ErrorCode(err) != nah.Unauthorized {
		t.Fatalf("token after delete: %v, want unauthorized", err)
	}
	if c, err := s.Connected(ctx, ann.ID, bob.ID); err != nil || c {
		t.Fatalf("still connected after delete (%v)", err)
	}
	if n, err := s.ConnectionCount(ctx, bob.ID); err != nil || n != 0 {
		t.Fatalf("bob has %d connections after delete (%v)", n, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "people", ann.ID)); !os.IsNotExist(err) {
		t.Fatalf("people/<id> after delete: %v", err)
	}
	if _, err := s.CreateMoment(ctx, ann.ID, []byte("x")); nah.ErrorCode(err) != nah.NotFound {
		t.Fatalf("post after delete: %v, want not found", err)
	}
	if _, _, err := s.FindPersonByHandle(ctx, "ann"); nah.ErrorCode(err) != nah.NotFound {
		t.Fatalf("find by handle after delete: %v", err)
	}
	if _, err := s.CreatePerson(ctx, NewPerson{Handle: "ann", PasswordHash: "x"}); nah.ErrorCode(err) != nah.Conflict {
		t.Fatalf("sign-up with a deleted handle: %v, want conflict", err)
	}
	if err := s.DeletePerson(ctx, ann.ID); nah.ErrorCode(err) != nah.NotFound {
		t.Fatalf("second delete: %v", err)
	}

	// Undo: every moment back, no connection, no session.
	if err := s.RestorePerson(ctx, ann.ID); err != nil {
		t.Fatal(err)
	}
	ms, err := s.Moments(ctx, ann.ID, nil, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != len(want) {
		t.Fatalf("%d moments after undo, want %d", len(ms), len(want))
	}
	p, err := s.FindPersonByID(ctx, ann.ID)
	if err != nil || p.NewestAt != ms[0].CreatedAt {
		t.Fatalf("after undo: %+v %v, want newest %d", p, err, ms[0].CreatedAt)
	}
	if c, err := s.Connected(ctx, ann.ID, bob.ID); err != nil || c {
		t.Fatalf("the connection came back with the undo (%v)", err)
	}
	if _, err := s.PersonForToken(ctx, token); nah.ErrorCode(err) != nah.Unauthorized {
		t.Fatalf("token after undo: %v, want unauthorized", err)
	}

	// Delete again; nothing is purged within the grace, all of it after.
	if err := s.DeletePerson(ctx, ann.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PurgeDeleted(ctx); err != nil || n != 0 {
		t.Fatalf("purge within the grace: %d, %v", n, err)
	}
	ds, err := s.DeletedPeople(ctx, 10)
	if err != nil || len(ds) != 1 || ds[0].ID != ann.ID || ds[0].PurgeAt != ds[0].DeletedAt+time.Hour.Milliseconds() {
		t.Fatalf("deleted people: %+v, %v", ds, err)
	}
	clock.Advance(time.Hour)
	if n, err := s.PurgeDeleted(ctx); err != nil || n != 1 {
		t.Fatalf("purge after the grace: %d, %v", n, err)
	}
	if _, err := s.CreatePerson(ctx, NewPerson{Handle: "ann", PasswordHash: "x"}); err != nil {
		t.Fatalf("sign-up with a purged handle: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.NoTrace(t, dir, ann.ID)
}

// TestDeleteWhilePosting deletes a person while goroutines post as them: each
// post succeeds or is NotFound, and the folder is never recreated.
func TestDeleteWhilePosting(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := MustOpen(t, Config{Dir: dir})
	ann := mustPerson(t, s, "ann")
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			<-start
			for range 50 {
				_, err := s.CreateMoment(ctx, ann.ID, []byte("x"))
				if err != nil && nah.ErrorCode(err) != nah.NotFound {
					t.Errorf("post: %v", err)
					return
				}
			}
		})
	}
	close(start)
	time.Sleep(5 * time.Millisecond)
	if err := s.DeletePerson(ctx, ann.ID); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if _, err := os.Stat(filepath.Join(dir, "people", ann.ID)); !os.IsNotExist(err) {
		t.Fatalf("people/<id> after delete: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "deleted", ann.ID, "person.db")); err != nil {
		t.Fatal(err)
	}
}

// TestOnlyTheServerSweeps: a store opened without Sweep (a command-line
// tool on the same data directory) never purges, even a person long past
// their grace; the serving store does, at its start.
func TestOnlyTheServerSweeps(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clock := testutil.NewClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	s, err := Open(ctx, Config{Dir: dir, Now: clock.Now, DeleteGrace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ann := mustPerson(t, s, "ann")
	if err := s.DeletePerson(ctx, ann.ID); err != nil {
		t.Fatal(err)
	}
	s.Close()
	clock.Advance(24 * time.Hour)
	count := func() int {
		t.Helper()
		s, err := Open(ctx, Config{Dir: dir, Now: clock.Now, DeleteGrace: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ds, err := s.DeletedPeople(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		return len(ds)
	}
	tool, err := Open(ctx, Config{Dir: dir, Now: clock.Now, DeleteGrace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	tool.Close()
	if n := count(); n != 1 {
		t.Fatalf("a store without Sweep purged: %d deleted people left, want 1", n)
	}
	server, err := Open(ctx, Config{Dir: dir, Now: clock.Now, DeleteGrace: time.Hour, Sweep: true})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ds, err := server.DeletedPeople(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the serving store did not purge a person past their grace")
		}
		time.Sleep(10 * time.Millisecond)
	}
	server.Close()
}

// TestDeletedPersonCannotComeBackThroughARace: a session or an invite made
// by a request that checked the person just before their deletion gives
// them nothing: the token is refused, a redeem finds no invite, and an
// undo keeps that session revoked too.
func TestDeletedPersonCannotComeBackThroughARace(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t, Config{DeleteGrace: time.Hour})
	ann, bob := mustPerson(t, s, "ann"), mustPerson(t, s, "bob")
	inv, err := s.CreateInvite(ctx, bob.ID)
	if err != nil {
		t.Fatal(err)
	}
	annInv, err := s.CreateInvite(ctx, ann.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePerson(ctx, ann.ID); err != nil {
		t.Fatal(err)
	}
	// What a sign-in whose password check ran before the deletion writes
	// after it.
	token, err := s.CreateSession(ctx, ann.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PersonForToken(ctx, token); nah.ErrorCode(err) != nah.Unauthorized {
		t.Fatalf("a deleted person's late session: %v", err)
	}
	if _, err := s.RedeemInvite(ctx, ann.ID, inv.Code); nah.ErrorCode(err) != nah.NotFound {
		t.Fatalf("a deleted person redeemed an invite: %v", err)
	}
	if _, err := s.RedeemInvite(ctx, bob.ID, annInv.Code); nah.ErrorCode(err) != nah.NotFound {
		t.Fatalf("an invite of a deleted person connected bob: %v", err)
	}
	if cs, err := s.Connections(ctx, bob.ID); err != nil || len(cs) != 0 {
		t.Fatalf("bob's connections: %v %v", cs, err)
	}
	if err := s.RestorePerson(ctx, ann.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PersonForToken(ctx, token); nah.ErrorCode(err) != nah.Unauthorized {
		t.Fatalf("after the undo, the late session works: %v", err)
	}
}
