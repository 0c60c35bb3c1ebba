package backup_test

import (
	"context"
	"os"
	"testing"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
)

// TestForgetOnlyADatabaseOfTheLayout: Forget removes folders named by the
// path it is given, in replication's state and on the target, so a path
// that is not a database of the layout is refused and removes nothing: with
// "../people/<id>" the state folder's parent is the data directory, and ann's
// live folder would go.
func TestForgetOnlyADatabaseOfTheLayout(t *testing.T) {
	tg, err := backup.ParseTarget(t.TempDir(), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := openNode(t, t.TempDir(), tg, nodeOpts{maxOpen: 4, maxWatched: 4})
	ann := n.person(t, "ann")
	n.post(t, ann, 0)
	for _, rel := range []string{"../" + nah.PersonDirRel(ann), "..", nah.PersonDirRel(ann), "people/" + ann + "/../../" + nah.DirectoryRel, ""} {
		if err := n.r.Forget(context.Background(), rel); err == nil {
			t.Errorf("Forget(%q) accepted", rel)
		}
		if _, err := os.Stat(n.s.Path(nah.PersonRel(ann))); err != nil {
			t.Fatalf("after Forget(%q), ann's file: %v", rel, err)
		}
	}
	if _, err := os.Stat(n.s.Path(nah.ReplicationRel)); err != nil {
		t.Fatalf("replication's state folder after the refusals: %v", err)
	}
}
