package app

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/store"
)

// TestUndoRestore: ann restored to a time, then the restore undone from
// her page through its confirmation step: her moments and media of before
// the restore are back (usage counting both media), the replica's newest
// copy is that file as soon as the undo returns, and there is nothing
// left to undo. Meanwhile the kept file was in no nightly copy and no
// full backup.
func TestUndoRestore(t *testing.T) {
	rs := newReplicatedServer(t)
	ann := rs.signup(t, "ann")
	early := rs.mustUpload(t, ann, bytes.Repeat([]byte("e"), 3000))
	_, at := rs.postAroundTime(t, ann, 2)
	for range 3 {
		rs.post(t, ann, []byte("late"))
	}
	late := rs.mustUpload(t, ann, bytes.Repeat([]byte("l"), 5000))
	mustSync(t, rs.backups)
	before := momentIDs(t, rs.store, ann.id)
	c := signedInAdmin(t, rs.testServer)
	personPage := rs.URL + "/console/people/" + ann.id
	if d := parseConsole(t, get(t, c, personPage).body); d.byID("undo-restore") != nil {
		t.Fatal("ann's page offers to undo a restore before any")
	}

	done := postRestore(t, c, rs.URL, ann.id, at.Format(time.RFC3339))
	if done.status != 200 || !strings.Contains(text(parseConsole(t, done.body).byID("restore-undo")), "can put it back until then") {
		t.Fatalf("restore: %d\n%s", done.status, done.body)
	}
	if n := len(momentIDs(t, rs.store, ann.id)); n != 2 {
		t.Fatalf("after the restore ann has %d moments, want 2", n)
	}
	if res, _ := rs.download(t, ann.token, ann.id, late.ID, nil); res.StatusCode != 404 {
		t.Fatalf("the media uploaded after the time, after the restore: %d", res.StatusCode)
	}

	// The kept file is in no nightly copy and no full backup.
	if res, err := rs.backups.Sweep.Run(context.Background(), time.Now()); err != nil || len(res.Failed) > 0 {
		t.Fatalf("sweep: %+v %v", res, err)
	}
	filepath.WalkDir(rs.replicaDir, func(p string, _ os.DirEntry, err error) error {
		if err == nil && strings.Contains(filepath.ToSlash(p), "/"+nah.ReplacedRel+"/") {
			t.Errorf("the replica holds %s", p)
		}
		return err
	})
	res, err := c.Get(rs.URL + "/console/backups/download")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range untarTo(t, res.Body, t.TempDir()) {
		if strings.HasPrefix(f, nah.ReplacedRel+"/") {
			t.Errorf("the full backup holds %s", f)
		}
	}
	res.Body.Close()

	d := parseConsole(t, get(t, c, personPage).body)
	if d.byID("undo-restore") == nil || d.byID("undo-until") == nil {
		t.Fatal("ann's page does not offer to undo the restore")
	}
	confirm := get(t, c, personPage+"/undo-restore")
	if cd := parseConsole(t, confirm.body); confirm.status != 200 || cd.byID("undo-confirm") == nil {
		t.Fatalf("confirmation: %d\n%s", confirm.status, confirm.body)
	}
	if n := len(momentIDs(t, rs.store, ann.id)); n != 2 {
		t.Fatalf("the confirmation step changed ann: %d moments", n)
	}
	undo := postForm(t, c, personPage+"/undo-restore", nil)
	if loc := undo.header.Get("Location"); undo.status != 303 || !strings.HasPrefix(loc, "/console/people/"+ann.id+"?") {
		t.Fatalf("undo: %d to %q\n%s", undo.status, loc, undo.body)
	}
	undone := get(t, c, rs.URL+undo.header.Get("Location"))
	ud := parseConsole(t, undone.body)
	if flash := ud.find("role", "status"); undone.status != 200 || len(flash) == 0 || !strings.Contains(text(flash[0]), "The restore is undone") || ud.byID("undo-restore") != nil {
		t.Fatalf("ann's page after the undo: %d\n%s", undone.status, undone.body)
	}
	if got := momentIDs(t, rs.store, ann.id); !slices.Equal(got, before) {
		t.Errorf("after the undo ann has %v, want %v", got, before)
	}
	// The replica has the file back at once: no sync in between.
	p := filepath.Join(t.TempDir(), "person.db")
	if _, err := backup.RestoreFile(context.Background(), rs.backups.Repl.Target(), nah.PersonRel(ann.id), p, time.Time{}); err != nil {
		t.Fatal(err)
	}
	got, err := store.ExportedMoments(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, before) {
		t.Errorf("the replica's newest copy after the undo has %d moments, want the %d of before the restore", len(got), len(before))
	}
	for _, m := range []mediaJSON{early, late} {
		if res, body := rs.download(t, ann.token, ann.id, m.ID, nil); res.StatusCode != 200 || len(body) != int(m.Size) {
			t.Errorf("media %s after the undo: %d, %d bytes", m.ID, res.StatusCode, len(body))
		}
	}
	me := rs.do(t, "GET", "/api/v1/me", ann.token, nil)
	if media, want := me.json["storage"].(map[string]any)["media"].(float64), nah.MediaCharge(3000)+5000; media != float64(want) {
		t.Errorf("media usage after the undo: %v, want %d", media, want)
	}
	if again := get(t, c, personPage+"/undo-restore"); again.status != 404 || !strings.Contains(again.body, "There is no restore of ann to undo") {
		t.Errorf("a second undo: %d\n%s", again.status, again.body)
	}
	if got := rs.leftovers(t, ann); len(got) != 0 {
		t.Errorf("ann's media folder holds %v", got)
	}
}

// TestRestoreRunsOnce: while a restore of ann is under way (as a double
// click without JavaScript, or a second tab, would find it), a second
// restore and an undo are refused in words and change nothing, rather
// than run again after the first; once it is done, the undo runs.
func TestRestoreRunsOnce(t *testing.T) {
	rs := newReplicatedServer(t)
	ann := rs.signup(t, "ann")
	_, at := rs.postAroundTime(t, ann, 2)
	rs.post(t, ann, []byte("late"))
	mustSync(t, rs.backups)
	c := signedInAdmin(t, rs.testServer)
	if p := postRestore(t, c, rs.URL, ann.id, at.Format(time.RFC3339)); p.status != 200 {
		t.Fatalf("restore: %d\n%s", p.status, p.body)
	}

	confirm := get(t, c, rs.URL+"/console/backups/restore?"+url.Values{"person": {ann.id}, "at": {at.Format(time.RFC3339)}}.Encode())
	ticket := ticketField.FindStringSubmatch(confirm.body)
	if ticket == nil {
		t.Fatalf("a second confirmation: %d\n%s", confirm.status, confirm.body)
	}
	rs.app.restoring.Store(ann.id, struct{}{}) // a second restore, running
	for _, u := range []string{"/console/backups/restore", "/console/people/" + ann.id + "/undo-restore"} {
		p := postForm(t, c, rs.URL+u, url.Values{"ticket": {ticket[1]}})
		if says := text(parseConsole(t, p.body).byID("error")); p.status != 409 || !strings.Contains(says, "A restore of ann is already under way") {
			t.Errorf("POST %s during a restore: %d %q", u, p.status, says)
		}
	}
	if n := len(momentIDs(t, rs.store, ann.id)); n != 2 {
		t.Fatalf("ann has %d moments after the refused asks, want the restore's 2", n)
	}
	rs.app.restoring.Delete(ann.id) // it is done
	if p := postForm(t, c, rs.URL+"/console/people/"+ann.id+"/undo-restore", nil); p.status != 303 {
		t.Fatalf("undo after it: %d\n%s", p.status, p.body)
	}
	if n := len(momentIDs(t, rs.store, ann.id)); n != 3 {
		t.Fatalf("ann has %d moments after the undo, want her 3", n)
	}
}
