package personfile

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
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
		id, _ := q.pop(300 * time.Millisecond)
		got <- id
	}()
	select {
	case id := <-got:
		t.Fatalf("pop(300 ms) took %q after %v, before the oldest was that old", id, time.Since(start))
	case <-time.After(150 * time.Millisecond):
	}
	if id, ok := q.pop(0); !ok || id != "a" {
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
	go func() { _, ok := q.pop(time.Hour); done <- ok }()
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

// TestMarkerLingers: a marker let go of after a ship stays on disk for a
// file written again soon (no removal and creation a ship), goes once
// due, and one marked again meanwhile is never removed: it says that its
// file holds writes the replica may lack.
func TestMarkerLingers(t *testing.T) {
	dir := t.TempDir()
	q := newQueue(dir, slog.New(slog.DiscardHandler))
	onDisk := func(id string) bool {
		_, err := os.Stat(filepath.Join(dir, id))
		return err == nil
	}
	for _, id := range []string{"a", "b"} {
		q.push(id)
		if got, _ := q.pop(0); got != id {
			t.Fatalf("pop = %q, want %q", got, id)
		}
		q.unmark(id, false) // shipped
		if !onDisk(id) {
			t.Fatalf("%s: the marker went at once", id)
		}
	}
	q.push("b") // written again: its marker is needed once more
	q.removeDue(0)
	if onDisk("a") {
		t.Error("a: the marker of a file shipped and not written since stayed after it was due")
	}
	if !onDisk("b") {
		t.Error("b: the marker of a file written again was removed")
	}
	q.pop(0)
	q.unmark("b", true)
	if onDisk("b") {
		t.Error("b: unmark now left the marker")
	}
}
