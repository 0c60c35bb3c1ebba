package app

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nah-app/nah"
)

// TestMeShowsWhatIsCharged: /me's storage is what the quota counts. Each
// media is charged nah.MediaChargeBytes at least, so a person uploading
// files of one byte is refused (413) once storage_used says the next one
// would not fit, not while it says the quota is far off.
func TestMeShowsWhatIsCharged(t *testing.T) {
	const quota = 512 << 10
	ts := newTestServer(t, func(c *serverConfig) { c.QuotaBytes = quota })
	ann := ts.signup(t, "ann")
	n := 0
	for ; n < quota; n++ {
		if status, _, raw := ts.upload(t, ann, []byte{byte(n)}, "image/jpeg"); status == 413 {
			break
		} else if status != 201 {
			t.Fatalf("upload %d: %d %s", n, status, raw)
		}
	}
	me := ts.do(t, "GET", "/api/v1/me", ann.token, nil)
	st := me.json["storage"].(map[string]any)
	media, db, used := int64(st["media"].(float64)), int64(st["database"].(float64)), int64(me.json["storage_used"].(float64))
	t.Logf("%d files of 1 byte, then 413: storage %v, storage_used %d of %d", n, st, used, quota)
	if media != int64(n)*nah.MediaChargeBytes || used != db+media {
		t.Errorf("%d files of 1 byte: storage.media %d, storage_used %d, want %d and database + media", n, media, used, int64(n)*nah.MediaChargeBytes)
	}
	if used+nah.MediaChargeBytes <= quota {
		t.Errorf("413 with storage_used %d, where one more file of %d fits the quota of %d", used, nah.MediaChargeBytes, quota)
	}
}

// TestMeDatabaseIsTheFile: storage.database is person.db alone, not its
// write-ahead log and index, whose size the checkpoints decide.
func TestMeDatabaseIsTheFile(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	for i := range 50 {
		ts.post(t, ann, make([]byte, 1000+i))
	}
	p := filepath.Join(ts.dir, nah.PersonRel(ann.id))
	db, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	wal, err := os.Stat(p + "-wal")
	if err != nil || wal.Size() == 0 {
		t.Fatalf("no write-ahead log beside person.db after 50 posts: %v", err)
	}
	st := ts.do(t, "GET", "/api/v1/me", ann.token, nil).json["storage"].(map[string]any)
	if got := int64(st["database"].(float64)); got != db.Size() {
		t.Errorf("storage.database %d, want person.db's %d (its -wal holds %d)", got, db.Size(), wal.Size())
	}
}
