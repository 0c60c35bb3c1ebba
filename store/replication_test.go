package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store/internal/personfile"
)

// TestWatchedSet: under concurrent posts to more people than the watched
// set holds, and feeds that open files without writing, the set stays
// within its bound (plus the files in use, and those being let go) and files leave it to
// make room, a file is never opened again while replication is still
// letting go of it, and at Close every watched file has been let go.
// (That every write reaches the replica is the end-to-end restore tests'.)
func TestWatchedSet(t *testing.T) {
	const maxWatched, writers = 3, 6
	var (
		mu                   sync.Mutex
		watched              = map[string]bool{}
		unwatching           = map[string]bool{}
		most, watches, drops int
		problems             []string
	)
	hooks := testHooks{
		MaxWatched: maxWatched,
		BeforeOpen: func(p string) error {
			mu.Lock()
			defer mu.Unlock()
			if unwatching[p] {
				problems = append(problems, "opened while replication lets go of it: "+p)
			}
			return nil
		},
		Watch: func(ctx context.Context, p string) error {
			mu.Lock()
			defer mu.Unlock()
			if watched[p] {
				problems = append(problems, "watched twice: "+p)
			}
			watched[p] = true
			watches++
			most = max(most, len(watched))
			return nil
		},
		Unwatch: func(p string) error {
			mu.Lock()
			if !watched[p] {
				problems = append(problems, "unwatched while not watched: "+p)
			}
			unwatching[p] = true
			mu.Unlock()
			time.Sleep(2 * time.Millisecond) // a last sync takes a while
			mu.Lock()
			delete(watched, p)
			delete(unwatching, p)
			drops++
			mu.Unlock()
			return nil
		},
	}
	s := MustOpen(t, hooks.config(Config{Dir: t.TempDir(), MaxOpenFiles: 16}))
	ctx := context.Background()
	var ids []string
	for i := range 10 {
		ids = append(ids, mustPerson(t, s, fmt.Sprintf("person%02d", i)).ID)
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range 50 {
				id := ids[(w*7+i*3)%len(ids)]
				if _, err := s.CreateMoment(ctx, id, []byte("x")); err != nil {
					t.Error(err)
					return
				}
				if i%10 == 0 {
					p := NewPage()
					s.Feed(ctx, ids[i%len(ids)], true, nil, 30, p) // reads open files that are not watched
					p.Release()
				}
			}
		})
	}
	wg.Wait()
	s.Close()
	mu.Lock()
	defer mu.Unlock()
	// Each writer holds one file and may have one evicted file still being
	// let go of (off the request path).
	if most > maxWatched+2*writers {
		problems = append(problems, fmt.Sprintf("%d files watched at once, bound %d (+%d in use or being let go)", most, maxWatched, 2*writers))
	}
	if len(watched) != 0 {
		problems = append(problems, fmt.Sprintf("%d files still watched after Close", len(watched)))
	}
	if watches <= len(ids) {
		problems = append(problems, fmt.Sprintf("%d watches for %d people: the bound of %d never let a file go", watches, len(ids), maxWatched))
	}
	if len(problems) > 0 {
		t.Fatal(strings.Join(problems, "\n"))
	}
}

// TestReplacePersonFile: a person's file swapped for another while others
// post: the person reads what the new file holds (head and newest time
// included), the directory's count follows, and a failing swap leaves the
// old file.
func TestReplacePersonFile(t *testing.T) {
	dir := t.TempDir()
	s := MustOpen(t, Config{Dir: dir})
	ctx := context.Background()
	ann, bob := mustPerson(t, s, "ann"), mustPerson(t, s, "bob")
	first, err := s.CreateMoment(ctx, ann.ID, []byte("kept"))
	if err != nil {
		t.Fatal(err)
	}
	// The copy as of now: the backup API, as a restore from a sweep would.
	snap, err := s.Backup(ctx, nah.PersonRel(ann.ID))
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if _, err := s.CreateMoment(ctx, ann.ID, []byte("gone after the restore")); err != nil {
		t.Fatal(err)
	}
	if ms, _ := s.Moments(ctx, ann.ID, nil, 10, nil); len(ms) != 2 { // warms the head
		t.Fatalf("%d moments before", len(ms))
	}
	var others sync.WaitGroup
	stop := make(chan struct{})
	others.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.CreateMoment(ctx, bob.ID, []byte("bob")); err != nil {
				t.Error(err)
				return
			}
		}
	})
	if err := s.ReplacePersonFile(ctx, ann.ID, func(p string) error { return fmt.Errorf("no copy") }); err == nil {
		t.Fatal("a failing make was not reported")
	}
	if ms, _ := s.Moments(ctx, ann.ID, nil, 10, nil); len(ms) != 2 {
		t.Fatalf("a failed swap changed the file: %d moments", len(ms))
	}
	err = s.ReplacePersonFile(ctx, ann.ID, func(p string) error {
		out, err := os.Create(p)
		if err != nil {
			return err
		}
		snap.Seek(0, 0)
		_, err = out.ReadFrom(snap)
		return errors.Join(err, out.Close())
	})
	close(stop)
	others.Wait()
	if err != nil {
		t.Fatal(err)
	}
	ms, err := s.Moments(ctx, ann.ID, nil, 10, nil)
	if err != nil || len(ms) != 1 || ms[0].ID != first.ID {
		t.Fatalf("after the restore: %v %v, want only %s", ms, err, first.ID)
	}
	page := NewPage()
	defer page.Release()
	if err := s.Feed(ctx, ann.ID, true, nil, 30, page); err != nil || len(page.Moments) != 1 {
		t.Fatalf("ann's feed after the restore: %d moments, %v", len(page.Moments), err)
	}
	if _, err := os.Stat(filepath.Join(dir, "people", ann.ID, "person.db.restoring")); !os.IsNotExist(err) {
		t.Fatalf("the scratch file stayed: %v", err)
	}
	var count int64
	if err := s.r.QueryRowContext(ctx, `SELECT moments FROM people WHERE id = ?`, ann.ID).Scan(&count); err != nil || count != 1 {
		t.Fatalf("directory count %d, %v; want 1", count, err)
	}
}

// TestWatchedCountDoesNotDrift: a file dropped from the cache between its
// acquire and its watch (another user's unreadable error, a hide) is
// watched, since the write must reach the replica, but not counted in the
// watched set it is no longer in: counted, the set would fill with ghosts
// and close every idle watched file at each write.
func TestWatchedCountDoesNotDrift(t *testing.T) {
	hooks := testHooks{
		MaxWatched: 2,
		Watch:      func(ctx context.Context, p string) error { return nil },
		Unwatch:    func(p string) error { return nil },
	}
	s := MustOpen(t, hooks.config(Config{Dir: t.TempDir(), MaxOpenFiles: 16}))
	ctx := context.Background()
	a := mustPerson(t, s, "alice").ID
	s.files.Forget(a)
	for range 3 {
		f, err := s.files.Acquire(ctx, a, false)
		if err != nil {
			t.Fatal(err)
		}
		s.files.Drop(f) // as useFile does after an unreadable error
		s.files.Watch(ctx, f)
		s.files.Release(f)
	}
	w, n := s.files.Watched(), s.files.Len()
	if w != 0 {
		t.Errorf("watched = %d with %d files in the cache", w, n)
	}
}

// TestBackupOfAClosedFileLeavesTheCache: the sweep's copy of a file nobody
// has open is made without opening it in the cache (which would close hot
// files to make room), and is the whole file.
func TestBackupOfAClosedFileLeavesTheCache(t *testing.T) {
	s := MustOpen(t, Config{Dir: t.TempDir()})
	ctx := context.Background()
	ann := mustPerson(t, s, "ann")
	for i := range 20 {
		if _, err := s.CreateMoment(ctx, ann.ID, fmt.Appendf(nil, "moment %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	s.files.Forget(ann.ID)
	if n := s.files.Len(); n != 0 {
		t.Fatalf("%d files open before the copy", n)
	}
	f, err := s.Backup(ctx, nah.PersonRel(ann.ID))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n := s.files.Len(); n != 0 {
		t.Fatalf("the copy opened %d files in the cache", n)
	}
	p := filepath.Join(t.TempDir(), "person.db")
	out, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := out.ReadFrom(f); err != nil {
		t.Fatal(err)
	}
	out.Close()
	ids, err := ExportedMoments(ctx, p)
	if err != nil || len(ids) != 20 {
		t.Fatalf("the copy holds %d moments (%v), want 20", len(ids), err)
	}
}

// TestReplicationQueue: posts do not take their file up for replication
// themselves; written files wait in a queue for the replicators (while the
// take-up is slow, the queue holds files), and by Close every written file
// was watched or let go of after its last acknowledged write, so the
// replica holds every write; no file is opened while replication lets go
// of it.
func TestReplicationQueue(t *testing.T) {
	var (
		mu        sync.Mutex
		seq       int
		lastWrite = map[string]int{} // path -> seq of its last acknowledged write
		lastSync  = map[string]int{} // path -> seq of its last Watch or Unwatch
		letting   = map[string]bool{}
		problems  []string
		watches   int
	)
	tick := func() int { seq++; return seq }
	hooks := testHooks{
		MaxWatched: 2,
		BeforeOpen: func(p string) error {
			mu.Lock()
			defer mu.Unlock()
			if letting[p] {
				problems = append(problems, "opened while replication lets go of it: "+p)
			}
			return nil
		},
		Watch: func(ctx context.Context, p string) error {
			time.Sleep(5 * time.Millisecond) // slower than a post: files queue up
			mu.Lock()
			lastSync[p] = tick()
			watches++
			mu.Unlock()
			return nil
		},
		Unwatch: func(p string) error {
			mu.Lock()
			letting[p] = true
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			delete(letting, p)
			lastSync[p] = tick()
			mu.Unlock()
			return nil
		},
	}
	dir := t.TempDir()
	s := MustOpen(t, hooks.config(Config{Dir: dir, MaxOpenFiles: 4}))
	ctx := context.Background()
	var ids []string
	for i := range 20 {
		ids = append(ids, mustPerson(t, s, fmt.Sprintf("person%02d", i)).ID)
	}
	var wg sync.WaitGroup
	most := 0
	for w := range 4 {
		wg.Go(func() {
			for i := range 40 {
				id := ids[(w*5+i*3)%len(ids)]
				if _, err := s.CreateMoment(ctx, id, []byte("x")); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				lastWrite[filepath.Join(dir, "people", id, "person.db")] = tick()
				mu.Unlock()
				if q := s.Stats().ReplicationQueue; q > 0 {
					mu.Lock()
					most = max(most, q)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	s.Close()
	mu.Lock()
	defer mu.Unlock()
	if most == 0 {
		problems = append(problems, "the queue never held a file: posts took their files up themselves")
	}
	for p, w := range lastWrite {
		if lastSync[p] < w {
			problems = append(problems, fmt.Sprintf("%s: last write at %d, last watch or let-go at %d: the write may not be replicated", p, w, lastSync[p]))
		}
	}
	if len(problems) > 0 {
		t.Fatal(strings.Join(problems, "\n"))
	}
	t.Logf("%d watches for %d people, queue up to %d", watches, len(ids), most)
}

// TestReplicationQueueSurvivesAKill: a written file waiting for replication
// is listed on disk until replication let go of it after a last sync (not
// merely took it up: its last writes may be in its WAL only), and a store
// opened on a queue
// that a killed process left behind takes those files up at once.
func TestReplicationQueueSurvivesAKill(t *testing.T) {
	dir := t.TempDir()
	qdir := filepath.Join(dir, "replication", "queue")
	gate := make(chan struct{})
	var gated atomic.Bool
	var mu sync.Mutex
	watched := map[string]int{}
	hooks := testHooks{
		QueueDir: qdir,
		Watch: func(ctx context.Context, p string) error {
			if gated.Load() {
				<-gate
			}
			mu.Lock()
			watched[p]++
			mu.Unlock()
			return nil
		},
		Unwatch: func(p string) error { return nil },
	}
	s := MustOpen(t, hooks.config(Config{Dir: dir}))
	openGate := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(openGate) // before the store's Close, even after a Fatal
	ctx := context.Background()
	ann := mustPerson(t, s, "ann")
	bob := mustPerson(t, s, "bob")
	s.files.Forget(bob.ID) // closed: bob's next post queues him
	gated.Store(true)      // and replication is slow to take him up
	mu.Lock()
	clear(watched) // his watch as a new person ended with the close
	mu.Unlock()
	if _, err := s.CreateMoment(ctx, bob.ID, []byte("waits for replication")); err != nil {
		t.Fatal(err)
	}
	if !marked(t, qdir, bob.ID) {
		t.Fatal("bob's written file is not listed while it waits")
	}
	openGate()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := watched[s.Path(nah.PersonRel(bob.ID))]
		mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("bob was not taken up")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Watched, his last writes may not be on the replica yet: a kill now
	// must take him up again at the next start.
	if !marked(t, qdir, bob.ID) {
		t.Fatal("bob's mark went when he was taken up, before his last sync")
	}
	s.files.Forget(bob.ID) // let go of, after a last sync, once the replicator releases him
	for {
		if !marked(t, qdir, bob.ID) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("bob's mark stayed after replication let go of him")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Close()

	// A process of the earlier layout, killed, leaves an empty file a person:
	// a store opened on them takes those people up without anyone posting,
	// and lists nothing once done.
	for _, id := range []string{ann.ID, bob.ID, "not-a-person"} {
		if err := os.WriteFile(filepath.Join(qdir, id), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	clear(watched)
	mu.Unlock()
	s2 := MustOpen(t, hooks.config(Config{Dir: dir}))
	deadline = time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(watched)
		mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the 2 people left in the queue were taken up", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s2.Close()
	if m, err := personfile.Marked(qdir); err != nil || len(m) > 0 {
		t.Errorf("%d still listed after Close (%v)", len(m), err)
	}
	for _, id := range []string{ann.ID, bob.ID} {
		if exists(filepath.Join(qdir, id)) {
			t.Errorf("%s: the earlier layout's mark stayed", id)
		}
	}
}

// TestReplacePersonFileRefusesForeignSchema: a copy restored from a replica
// that someone else could write is checked like an import: one that
// carries a trigger (which would run on the server's own inserts), a view,
// an extra table or a generated column is refused, and the old file stays.
func TestReplacePersonFileRefusesForeignSchema(t *testing.T) {
	s := MustOpen(t, Config{})
	ctx := context.Background()
	ann := mustPerson(t, s, "ann")
	if _, err := s.CreateMoment(ctx, ann.ID, []byte("kept")); err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]string{
		"trigger":      `CREATE TABLE log(x BLOB); CREATE TRIGGER grow AFTER INSERT ON moments BEGIN INSERT INTO log VALUES (zeroblob(65536)); END`,
		"view":         `CREATE VIEW v AS SELECT 1`,
		"generated":    `DROP TABLE moments; CREATE TABLE moments (id TEXT PRIMARY KEY, created_at INTEGER NOT NULL, body BLOB AS (zeroblob(65536)) VIRTUAL) WITHOUT ROWID; CREATE INDEX moments_time ON moments(created_at, id)`,
		"no migration": `PRAGMA user_version = 0`,
	} {
		t.Run(name, func(t *testing.T) {
			snap, err := s.Backup(ctx, nah.PersonRel(ann.ID))
			if err != nil {
				t.Fatal(err)
			}
			defer snap.Close()
			err = s.ReplacePersonFile(ctx, ann.ID, func(p string) error {
				out, err := os.Create(p)
				if err != nil {
					return err
				}
				_, err = out.ReadFrom(snap)
				if err = errors.Join(err, out.Close()); err != nil {
					return err
				}
				db, err := openDB(p, false, 1, personCacheKiB, SyncFull, false)
				if err != nil {
					return err
				}
				_, err = db.Exec(change)
				return errors.Join(err, db.Close())
			})
			if nah.ErrorCode(err) != nah.Unavailable || !strings.Contains(err.Error(), "not a person file of this server") {
				t.Fatalf("a copy with a %s: %v, want it refused", name, err)
			}
			if ms, err := s.Moments(ctx, ann.ID, nil, 10, nil); err != nil || len(ms) != 1 {
				t.Fatalf("after a refused copy: %d moments, %v", len(ms), err)
			}
		})
	}
}

// TestWatchedSetHoldsExactlyItsBound: with a bound of 3, posts to three
// closed people are three watches and no unwatch; a post to a fourth is
// one more watch and exactly one unwatch, of the least recently used.
func TestWatchedSetHoldsExactlyItsBound(t *testing.T) {
	var (
		mu        sync.Mutex
		watched   []string
		unwatched []string
	)
	hooks := testHooks{
		MaxWatched: 3,
		Watch: func(ctx context.Context, p string) error {
			mu.Lock()
			defer mu.Unlock()
			watched = append(watched, p)
			return nil
		},
		Unwatch: func(p string) error {
			mu.Lock()
			defer mu.Unlock()
			unwatched = append(unwatched, p)
			return nil
		},
	}
	s := MustOpen(t, hooks.config(Config{Dir: t.TempDir(), MaxOpenFiles: 16}))
	ctx := context.Background()
	var ids, paths []string
	for i := range 4 {
		id := mustPerson(t, s, fmt.Sprintf("person%d", i)).ID
		s.files.Forget(id)
		p, _ := s.personPath(id)
		ids, paths = append(ids, id), append(paths, p)
	}
	mu.Lock()
	watched, unwatched = nil, nil // a new person's file is watched at once; Forget let go of it
	mu.Unlock()
	counts := func() (int, []string) {
		mu.Lock()
		defer mu.Unlock()
		return len(watched), slices.Clone(unwatched)
	}
	post := func(i int) {
		t.Helper()
		if _, err := s.CreateMoment(ctx, ids[i], []byte("x")); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			if n, _ := counts(); n == i+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("post %d was not taken up", i)
			}
		}
		time.Sleep(50 * time.Millisecond) // an unwatch it causes has run by now
	}
	for i := range 3 {
		post(i)
	}
	if n, un := counts(); n != 3 || len(un) != 0 {
		t.Fatalf("three posts: %d watches, unwatched %v; want 3 and none", n, un)
	}
	post(3)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, un := counts(); len(un) > 0 || time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(50 * time.Millisecond) // a second unwatch would have run by now
	if n, un := counts(); n != 4 || !slices.Equal(un, paths[:1]) {
		t.Fatalf("a fourth post: %d watches, unwatched %v; want 4 and only %s", n, un, paths[0])
	}
}

// TestUnwatchWaitsForAWatchInProgress: a file closed while replication is
// still taking it up (a new person's file is watched off the request path)
// is let go of only once the Watch has returned: a file let go of before
// Litestream set it up gets no last sync.
func TestUnwatchWaitsForAWatchInProgress(t *testing.T) {
	var (
		mu       sync.Mutex
		watching = map[string]bool{}
		problems []string
	)
	gate, entered := make(chan struct{}), make(chan struct{}, 1)
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open) // every gate opens, even after a Fatal
	hooks := testHooks{
		Watch: func(ctx context.Context, p string) error {
			mu.Lock()
			watching[p] = true
			mu.Unlock()
			entered <- struct{}{}
			<-gate
			mu.Lock()
			delete(watching, p)
			mu.Unlock()
			return nil
		},
		Unwatch: func(p string) error {
			mu.Lock()
			defer mu.Unlock()
			if watching[p] {
				problems = append(problems, "let go of while its Watch runs: "+p)
			}
			return nil
		},
	}
	s := MustOpen(t, hooks.config(Config{Dir: t.TempDir()}))
	ann := mustPerson(t, s, "ann")
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the new person's file was not watched")
	}
	forgot := make(chan struct{})
	go func() {
		s.files.Forget(ann.ID)
		close(forgot)
	}()
	select {
	case <-forgot:
		t.Error("the close returned while the Watch was still running")
	case <-time.After(50 * time.Millisecond):
	}
	open()
	<-forgot
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Error(p)
	}
}

// TestReplaceSyncsTheFolder: the rename that swaps a restored file into
// place is made durable (the folder is synced after it) before the
// restore is reported; without that, a power cut may bring the old file
// back after a restore said it was done.
func TestReplaceSyncsTheFolder(t *testing.T) {
	dir := t.TempDir()
	s := MustOpen(t, Config{Dir: dir})
	ctx := context.Background()
	ann := mustPerson(t, s, "ann")
	snap, err := s.Backup(ctx, nah.PersonRel(ann.ID))
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	p, _ := s.personPath(ann.ID)
	var mu sync.Mutex
	var renamed, synced bool
	dirSynced = func(d string) {
		mu.Lock()
		defer mu.Unlock()
		if d == filepath.Dir(p) && renamed {
			synced = true
		}
	}
	t.Cleanup(func() { dirSynced = nil })
	err = s.ReplacePersonFile(ctx, ann.ID, func(tmp string) error {
		out, err := os.Create(tmp)
		if err != nil {
			return err
		}
		defer out.Close()
		_, err = out.ReadFrom(snap)
		mu.Lock()
		renamed = true // the swap's rename comes after make
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !synced {
		t.Fatal("the person's folder was not synced after the restored file was renamed into place")
	}
}
