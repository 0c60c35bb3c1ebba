package app

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nah-app/nah"
)

// TestPurgeForgetsTheReplica: a person purged goes from the replica too:
// their file's history, their media's mirror and replication's local state
// of them, folders included; someone else's stay. The purge takes well
// under the directory's 10 s busy timeout.
func TestPurgeForgetsTheReplica(t *testing.T) {
	rs := newReplicatedServer(t, func(c *serverConfig) { c.DeleteGrace = -1 })
	ann, bob := rs.signup(t, "ann"), rs.signup(t, "bob")
	for _, a := range []account{ann, bob} {
		rs.post(t, a, []byte("a moment"))
		rs.mustUpload(t, a, []byte("a photo of "+a.handle))
	}
	mustSync(t, rs.backups)
	if res, err := rs.backups.Sweep.Run(context.Background(), rs.app.now()); err != nil || len(res.Failed) > 0 {
		t.Fatalf("sweep: %+v %v", res, err)
	}
	places := func(id string) map[string]string {
		return map[string]string{
			"history":      filepath.Join(rs.replicaDir, filepath.FromSlash(nah.PersonDirRel(id))),
			"media mirror": filepath.Join(rs.replicaDir, "media", filepath.FromSlash(nah.PersonDirRel(id))),
			"local state":  rs.store.Path(nah.ReplicationRel + "/" + nah.PersonDirRel(id)),
		}
	}
	for what, p := range places(ann.id) {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("before the purge, ann's %s: %v", what, err)
		}
	}
	start := time.Now()
	if r := rs.do(t, "DELETE", "/api/v1/me", ann.token, map[string]string{"password": "password-ann"}); r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.raw)
	}
	// The purge's checkpoint of the directory, which Litestream holds a
	// read on, once waited the whole 10 s busy timeout.
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the deletion, purged at once, took %v", took)
	}
	for what, p := range places(ann.id) {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("after the purge, ann's %s is still there (%v)", what, err)
		}
	}
	for what, p := range places(bob.id) {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("after ann's purge, bob's %s: %v", what, err)
		}
	}
}
