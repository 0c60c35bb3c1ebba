package app

import (
	"fmt"
	"net/http"
	"os"
	"sync"

	"github.com/go-chi/chi/v5"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/ui"
)

// restoreRun is a restore of one person to a time, or its undo, under
// way: which step it is at, for the page that waits on it.
type restoreRun struct {
	handle string
	undo   bool

	mu       sync.Mutex
	at, of   int
	fetching string // the copy being written, during a restore's step 1
}

// startRestore marks p's file as being replaced, by a restore or its
// undo, and returns its run, or nil if one was already: the store would
// run a second one after the first (a double click without JavaScript,
// another tab), restoring twice.
func (a *App) startRestore(p nah.Person, undo bool) *restoreRun {
	run := &restoreRun{handle: p.Handle, undo: undo}
	if _, running := a.restoring.LoadOrStore(p.ID, run); running {
		return nil
	}
	return run
}

// steps is the run's backup.Steps.
func (r *restoreRun) steps(step, of int, fetching string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at, r.of, r.fetching = step, of, fetching
}

// sentence says what the run is doing and how far it is, in words.
func (r *restoreRun) sentence() string {
	r.mu.Lock()
	step, of, fetching := r.at, r.of, r.fetching
	r.mu.Unlock()
	h := r.handle
	var doing string
	switch {
	case step == 0 && r.undo:
		return "Starting the undo of " + h + "'s restore…"
	case step == 0:
		return "Starting the restore of " + h + "…"
	case r.undo && step == 1:
		doing = "putting back the file " + h + "'s restore replaced"
	case r.undo:
		doing = "sending it to the replica"
	case step == 1:
		doing = "fetching " + h + "'s file from the replica and checking it"
		if n := grownSize(fetching); n > 0 {
			doing += " (" + ui.Bytes(n) + " so far)"
		}
	case step == 2:
		doing = "putting the restored file in place of " + h + "'s"
	default:
		doing = "sending it to the replica"
	}
	return fmt.Sprintf("Step %d of %d: %s…", step, of, doing)
}

// grownSize is how much of a restore's copy is written: Litestream writes
// it beside its name with ".tmp" and renames it when whole.
func grownSize(p string) int64 {
	if p == "" {
		return 0
	}
	var n int64
	for _, q := range []string{p, p + ".tmp"} {
		if fi, err := os.Stat(q); err == nil {
			n = max(n, fi.Size())
		}
	}
	return n
}

// handleRestoreProgress answers how far a restore of person id, or its
// undo, is, as one sentence of plain text; 204 when none runs. console.js
// asks for it while the restore's form waits for its answer.
func (a *App) handleRestoreProgress(w http.ResponseWriter, r *http.Request) {
	v, ok := a.restoring.Load(chi.URLParam(r, "id"))
	if !ok {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprint(w, v.(*restoreRun).sentence())
}
