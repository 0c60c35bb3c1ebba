package personfile

import (
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nah-app/nah"
)

// TestPopWaitsForTheAge: the extra replicators (pop with behindLag) take
// nothing from a queue that is not behind, and take its oldest once it is;
// the two replicators always at work (pop with 0) take a file at once.
// The queue is the real one, on disk markers off.
func TestPopWaitsForTheAge(t *testing.T) {
	q := newQueue("", nil)
	q.push("a")
	q.push("b")
	got := make(chan string, 2)
	start := time.Now()
	go func() {
		id, _, _ := q.pop(300 * time.Millisecond)
		got <- id
	}()
	select {
	case id := <-got:
		t.Fatalf("pop(300 ms) took %q after %v, before the oldest was that old", id, time.Since(start))
	case <-time.After(150 * time.Millisecond):
	}
	if id, _, ok := q.pop(0); !ok || id != "a" {
		t.Fatalf("pop(0) = %q, %v; want the oldest, a, at once", id, ok)
	}
	select {
	case id := <-got:
		if id != "b" || time.Since(start) < 300*time.Millisecond {
			t.Fatalf("pop(300 ms) took %q after %v", id, time.Since(start))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pop(300 ms) never took the file once it was old enough")
	}
	// A wait for an age ends with the queue.
	done := make(chan bool)
	go func() { _, _, ok := q.pop(time.Hour); done <- ok }()
	q.close()
	select {
	case ok := <-done:
		if ok {
			t.Fatal("pop took something from a closed queue")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pop(1 h) did not return when the queue closed")
	}
}

// TestMarksJournal: the journal on disk says, at every step, exactly which
// people a start after a kill must replicate (a person marked until let go
// of, and still marked when written again before that), stays small
// through thousands of marks, and a start takes up what it holds, and the
// empty files a person of the earlier layout, which then go.
func TestMarksJournal(t *testing.T) {
	dir := t.TempDir()
	q := newQueue(dir, slog.New(slog.DiscardHandler))
	want := map[string]bool{}
	check := func(step string) {
		t.Helper()
		got, err := Marked(dir)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("%s: on disk %d marks, want %d (%v against %v)", step, len(got), len(want), got, want)
		}
	}
	a, b := nah.NewPersonID(), nah.NewPersonID()
	q.push(a)
	q.push(b)
	want[a], want[b] = true, true
	check("two written")
	q.pop(0)
	q.unmark(a) // shipped
	delete(want, a)
	check("a shipped")
	q.push(a)
	want[a] = true
	check("a written again")
	q.pop(0) // b, taken up
	q.push(b)
	q.unmark(b) // let go of, but written again meanwhile
	check("b written while let go of")

	// Thousands of people shipped one by one: the journal is written
	// afresh and stays within twice the live marks and the slack.
	if n := len(q.take()); n != 2 { // a and b, taken up and still marked
		t.Fatalf("%d queued, want a and b", n)
	}
	for range 5000 {
		q.push(nah.NewPersonID())
		id, _, _ := q.pop(0)
		q.unmark(id)
	}
	check("after 5,000 ships")
	st, err := os.Stat(filepath.Join(dir, marksFile))
	if err != nil {
		t.Fatal(err)
	}
	if most := int64(2*len(want)+marksSlack+1) * int64(len(a)+2); st.Size() > most {
		t.Errorf("the journal is %d bytes after 5,000 ships with %d marks live, want at most %d", st.Size(), len(want), most)
	}

	// A kill: no flush. Beside the journal, an empty file a person from the
	// earlier layout, and a torn last line.
	old := nah.NewPersonID()
	if err := os.WriteFile(filepath.Join(dir, old), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	want[old] = true
	jf, err := os.OpenFile(filepath.Join(dir, marksFile), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jf.WriteString("+" + nah.NewPersonID()[:5]); err != nil {
		t.Fatal(err)
	}
	jf.Close()
	check("killed")
	r := newQueue(dir, slog.New(slog.DiscardHandler))
	r.load()
	queued := map[string]bool{}
	for _, id := range r.take() {
		queued[id] = true
	}
	if !maps.Equal(queued, want) {
		t.Errorf("the start queued %d people, want the %d marked", len(queued), len(want))
	}
	if _, err := os.Stat(filepath.Join(dir, old)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the earlier layout's mark stayed after the start: %v", err)
	}
	check("started again")
	r.unmark(old)
	delete(want, old)
	check("the old mark shipped")
	r.flush()
	check("stopped")
}

// TestClaimKeepsTheOrder: a person claimed from the middle of the queue
// (their file shipped at its close) leaves the others in their order, is
// queued afresh at the end by their next write, and one put back after a
// failed ship is first, with the time they waited since; claims and writes
// without end leave the queue's order bounded by the people in it.
func TestClaimKeepsTheOrder(t *testing.T) {
	q := newQueue("", nil)
	for _, id := range []string{"a", "b", "c", "d"} {
		q.push(id)
	}
	if _, ok := q.claim("b"); !ok {
		t.Fatal("b was queued, and claim said not")
	}
	if _, ok := q.claim("b"); ok {
		t.Fatal("b claimed twice")
	}
	if n, _ := q.state(); n != 3 {
		t.Fatalf("%d queued after a claim, want 3", n)
	}
	q.claim("a")
	q.push("a") // written again: at the end
	at, _ := q.claim("d")
	time.Sleep(20 * time.Millisecond)
	q.putBack("d", at)
	if _, oldest := q.state(); oldest < 20*time.Millisecond {
		t.Errorf("the oldest waited %v, want d's wait since before its claim", oldest)
	}
	var got []string
	for range 3 {
		id, _, _ := q.pop(0)
		got = append(got, id)
	}
	if want := []string{"d", "c", "a"}; !slices.Equal(got, want) {
		t.Fatalf("popped %v, want %v", got, want)
	}
	for range 10_000 {
		q.push("x")
		q.claim("x")
	}
	if len(q.due.es)+len(q.synced.es) != len(q.byID) || len(q.age.es) != len(q.byID) {
		t.Errorf("%d, %d and %d places for %d people queued", len(q.due.es), len(q.synced.es), len(q.age.es), len(q.byID))
	}
	q.push("y")
	if id, _, _ := q.pop(0); id != "y" {
		t.Errorf("popped %q, want y, the one person queued", id)
	}
}

// TestWatchedFilesWaitTheirTurn: a file queued while watched goes to the
// syncers (popSync), not to the replicators, and not before it is due; a
// write queued again meanwhile, and a failed sync that puts it back, keep
// its first write's time, which the queue's lag counts from; a sync
// outside the queue takes it out only if it began after its last write.
func TestWatchedFilesWaitTheirTurn(t *testing.T) {
	q := newQueue("", nil)
	due := time.Now().Add(300 * time.Millisecond)
	q.pushDue("w", due, true)
	first, _ := q.since("w")
	time.Sleep(10 * time.Millisecond)
	q.pushDue("w", due, true) // written again
	q.push("n")
	if id, _, _ := q.pop(0); id != "n" {
		t.Fatalf("a replicator took %q, want n, the one file not watched", id)
	}
	type popped struct {
		id string
		at time.Time
	}
	got := make(chan popped, 1)
	go func() { id, at, _ := q.popSync(); got <- popped{id, at} }()
	var p popped
	select {
	case p = <-got:
	case <-time.After(5 * time.Second):
		q.close()
		t.Fatal("the syncers never got w")
	}
	if p.id != "w" || time.Now().Before(due) || !p.at.Equal(first) {
		t.Fatalf("popSync = %q since %v at %v; want w since %v, not before %v", p.id, p.at, time.Now(), first, due)
	}
	at := p.at
	q.pushDue("w", time.Now().Add(time.Second), true) // written during the sync
	q.put("w", at, time.Now().Add(time.Second), true) // which failed
	if got, _ := q.since("w"); !got.Equal(first) {
		t.Errorf("after a failed sync w waits since %v, want its first write's %v", got, first)
	}
	if _, oldest := q.state(); oldest < 300*time.Millisecond {
		t.Errorf("the oldest write waited %v, want w's since its first write", oldest)
	}

	// Synced outside the queue ("Sync now"): a write after the sync began
	// stays queued; once one began after it, w leaves the queue.
	began := time.Now()
	time.Sleep(time.Millisecond)
	q.pushDue("w", time.Now().Add(time.Second), true)
	q.syncedSince("w", began)
	if _, queued := q.since("w"); !queued {
		t.Fatal("a sync that began before w's last write took w out of the queue")
	}
	q.syncedSince("w", time.Now())
	if _, queued := q.since("w"); queued {
		t.Fatal("a sync that began after w's last write left w in the queue")
	}

	// A syncer and a replicator, each waiting on an empty queue, are woken
	// by a write of their kind.
	for _, watched := range []bool{true, false} {
		go func() {
			pop := q.pop
			if watched {
				pop = func(time.Duration) (string, time.Time, bool) { return q.popSync() }
			}
			id, at, _ := pop(0)
			got <- popped{id, at}
		}()
		time.Sleep(20 * time.Millisecond)
		q.pushDue("v", time.Time{}, watched)
		select {
		case p = <-got:
		case <-time.After(5 * time.Second):
			q.close()
			t.Fatalf("a waiting pop (watched %v) was not woken by a write of its kind", watched)
		}
		if p.id != "v" {
			t.Fatalf("popped %q, want v", p.id)
		}
	}
}
