package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/internal/tests3"
	"github.com/nah-app/nah/store"
)

// mirrorBound is how long past backup.MediaMirrorQuiet a photo may take to
// reach the target on the test machine (a mirror takes milliseconds).
const mirrorBound = 10 * time.Second

// mirrorTarget is a replica target the server is started on: its URL, the
// variables it needs and the target as nah restore opens it.
type mirrorTarget struct {
	url string
	env []string
	tg  *backup.Target
}

func dirMirrorTarget(t *testing.T) mirrorTarget {
	repl := filepath.Join(t.TempDir(), "replica")
	return mirrorTarget{url: repl, tg: openTarget(t, repl, nil)}
}

func s3MirrorTarget(t *testing.T, prefix string) mirrorTarget {
	srv := tests3.Start(t)
	env := srv.Env(srv.Endpoint())
	mt := mirrorTarget{url: "s3://" + tests3.Bucket + "/" + prefix}
	for k, v := range env {
		mt.env = append(mt.env, k+"="+v)
	}
	mt.tg = openTarget(t, mt.url, env)
	return mt
}

func openTarget(t *testing.T, url string, env map[string]string) *backup.Target {
	t.Helper()
	tg, err := backup.ParseTarget(url, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	return tg
}

// serverEnv is the server's environment for the target: no sweep, so
// that only the media mirror brings photos to it.
func (mt mirrorTarget) serverEnv(more ...string) []string {
	return append(append(replicaEnv(mt.url), mt.env...), more...)
}

// mirrored is media rel's bytes on the target, nil while it has none.
func (mt mirrorTarget) mirrored(t *testing.T, rel string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "m")
	if err := backup.RestoreMedia(context.Background(), mt.tg, rel, out); err != nil {
		return nil
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// upload posts photo as token's media and returns its id.
func (p *proc) upload(t *testing.T, token string, photo []byte) string {
	t.Helper()
	id, err := p.tryUpload(token, photo)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (p *proc) tryUpload(token string, photo []byte) (string, error) {
	req, _ := http.NewRequest("POST", "http://"+p.addr+"/api/v1/media", bytes.NewReader(photo))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "image/jpeg")
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("upload: %w", err)
	}
	defer resp.Body.Close()
	var m struct{ ID string }
	json.NewDecoder(resp.Body).Decode(&m)
	if resp.StatusCode != http.StatusCreated || m.ID == "" {
		return "", fmt.Errorf("upload: %d", resp.StatusCode)
	}
	return m.ID, nil
}

// tusUpload sends photo as one resumable upload (a creation, then one
// PATCH of it whole) and returns the media id its end made.
func (p *proc) tusUpload(t *testing.T, token string, photo []byte) string {
	t.Helper()
	do := func(method, url string, body []byte, h ...string) *http.Response {
		req, _ := http.NewRequest(method, url, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Tus-Resumable", "1.0.0")
		for i := 0; i < len(h); i += 2 {
			req.Header.Set(h[i], h[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := do("POST", "http://"+p.addr+"/api/v1/uploads", nil, "Upload-Length", fmt.Sprint(len(photo)))
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusCreated || loc == "" {
		t.Fatalf("tus creation: %d %q", resp.StatusCode, loc)
	}
	if strings.HasPrefix(loc, "/") {
		loc = "http://" + p.addr + loc
	}
	resp = do("PATCH", loc, photo, "Content-Type", "application/offset+octet-stream", "Upload-Offset", "0")
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Media-Id") == "" {
		t.Fatalf("tus patch: %d, media %q", resp.StatusCode, resp.Header.Get("Media-Id"))
	}
	return resp.Header.Get("Media-Id")
}

// importCopy exports person id of the stopped server's data directory and
// imports them back with nah person import as handle, returning their
// photo's path under the data directory.
func importCopy(t *testing.T, data string, mt mirrorTarget, id, handle string) string {
	t.Helper()
	ctx := context.Background()
	s, err := store.Open(ctx, store.Config{Dir: data})
	if err != nil {
		t.Fatal(err)
	}
	e, err := s.ExportPerson(ctx, id, "v-test")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "export.tar")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.WriteTo(f)
	e.Close()
	f.Close()
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	env := append([]string{"NAH_DATA_DIR=" + data, "NAH_REPLICA_URL=" + mt.url}, mt.env...)
	out, errOut, code := nahRunEnv(t, env, "person", "import", "-handle", handle, file)
	m := regexp.MustCompile(` as (\S+) with`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("nah person import: exit %d\n%s%s", code, out, errOut)
	}
	media, _ := filepath.Glob(filepath.Join(data, "people", m[1], "media", "*"))
	if len(media) != 1 {
		t.Fatalf("the imported person has %d media files, want 1", len(media))
	}
	return nah.MediaRel(m[1], filepath.Base(media[0]))
}

// photo is n random bytes.
func photo(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// kill stops the server with SIGKILL.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

// TestPhotoReachesTheReplicaSoon: a person posts a moment and uploads the
// photo it points at, with no sweep planned; the photo is on the target
// within the mirror's quiet time and a bound, the disk is then lost (kill
// -9, the data directory removed) and nah restore brings back the moment
// and the photo, byte for byte. Before the media mirror the moment came
// back and the photo did not: media reached the target only at the sweep.
// On a directory and on S3.
func TestPhotoReachesTheReplicaSoon(t *testing.T) {
	t.Run("dir", func(t *testing.T) { photoReachesTheReplica(t, dirMirrorTarget(t)) })
	t.Run("s3", func(t *testing.T) { photoReachesTheReplica(t, s3MirrorTarget(t, "soon")) })
}

func photoReachesTheReplica(t *testing.T, mt mirrorTarget) {
	data, out := t.TempDir(), filepath.Join(t.TempDir(), "restored")
	p := start(t, data, mt.serverEnv()...)
	id, ann := p.signup(t, "ann")
	pic := photo(300 << 10)
	mid := p.upload(t, ann, pic)
	moment := p.post(t, ann, "at the beach: "+mid)
	uploaded := time.Now()
	rel := nah.MediaRel(id, mid)
	for time.Since(uploaded) < backup.MediaMirrorQuiet+mirrorBound && mt.mirrored(t, rel) == nil {
		time.Sleep(200 * time.Millisecond)
	}
	if got := mt.mirrored(t, rel); !bytes.Equal(got, pic) {
		t.Errorf("the photo is not on the target %v after its upload (%d bytes there)", time.Since(uploaded).Round(time.Second), len(got))
	} else {
		t.Logf("the photo was on the target %v after its upload", time.Since(uploaded).Round(100*time.Millisecond))
	}

	p.kill(t)
	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	o, e, code := nahRunEnv(t, mt.env, "restore", "-from", mt.url, "-to", out)
	if code != 0 {
		t.Fatalf("nah restore: exit %d\n%s%s", code, o, e)
	}
	p2 := start(t, out, "NAH_REPLICA_URL=off")
	if !p2.ownMoments(t, id, ann)[moment] {
		t.Errorf("the moment is not in the restore")
	}
	got, err := os.ReadFile(filepath.Join(out, filepath.FromSlash(rel)))
	if !bytes.Equal(got, pic) {
		t.Errorf("the photo the restored moment points at: %d bytes, %v; want %d", len(got), err, len(pic))
	}
	p2.stop(t)
}

// TestMediaBurstOfManyPeople: 24 people upload 3 photos each at once; every
// photo is on the target within the mirror's quiet time and a bound, each
// person's burst in one mirror, and after the disk is lost every photo
// restores byte for byte.
func TestMediaBurstOfManyPeople(t *testing.T) {
	const people, each = 24, 3
	mt := dirMirrorTarget(t)
	data, out := t.TempDir(), filepath.Join(t.TempDir(), "restored")
	p := start(t, data, mt.serverEnv("NAH_LOG_LEVEL=debug")...)
	ids, tokens := make([]string, people), make([]string, people)
	for i := range people {
		ids[i], tokens[i] = p.signup(t, fmt.Sprintf("burst%02d", i))
	}
	var mu sync.Mutex
	pics := map[string][]byte{} // rel → bytes
	var wg sync.WaitGroup
	for i := range people {
		wg.Go(func() {
			for j := range each {
				pic := photo(20<<10 + i*1000 + j)
				mid, err := p.tryUpload(tokens[i], pic)
				if err != nil {
					t.Error(err)
					return
				}
				rel := nah.MediaRel(ids[i], mid)
				mu.Lock()
				pics[rel] = pic
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	uploaded := time.Now()
	missing := func() []string {
		var m []string
		for rel, pic := range pics {
			if !bytes.Equal(mt.mirrored(t, rel), pic) {
				m = append(m, rel)
			}
		}
		return m
	}
	for time.Since(uploaded) < backup.MediaMirrorQuiet+mirrorBound && len(missing()) > 0 {
		time.Sleep(500 * time.Millisecond)
	}
	if m := missing(); len(m) > 0 {
		t.Fatalf("%d of %d photos not on the target %v after the burst (%s first)", len(m), len(pics), time.Since(uploaded).Round(time.Second), m[0])
	}
	t.Logf("%d photos of %d people on the target %v after the burst", len(pics), people, time.Since(uploaded).Round(100*time.Millisecond))
	for _, id := range ids {
		if n := strings.Count(p.log(), `"media mirrored" person=`+id); n != 1 {
			t.Errorf("person %s: mirrored %d times for a burst of %d photos, want once", id, n, each)
		}
	}

	p.kill(t)
	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	restoreInto(t, mt.url, out)
	for rel, pic := range pics {
		if got, err := os.ReadFile(filepath.Join(out, filepath.FromSlash(rel))); !bytes.Equal(got, pic) {
			t.Errorf("%s restored: %d bytes, %v; want %d", rel, len(got), err, len(pic))
		}
	}
}

// TestMediaWaitingAtAStop: a photo uploaded just before a kill -9, a video
// sent by a resumable upload, whose mirrors have not run, and the photo of
// a person imported by nah person import while the server was down reach
// the target soon after the next start (well before the quiet time: their
// owners' marks say they wait); a photo uploaded just before a SIGTERM is
// on the target once the server has exited.
func TestMediaWaitingAtAStop(t *testing.T) {
	mt := dirMirrorTarget(t)
	data := t.TempDir()
	p := start(t, data, mt.serverEnv()...)
	id, ann := p.signup(t, "ann")
	bob, bobToken := p.signup(t, "bob")
	pic, video := photo(100<<10), photo(300<<10)
	rel := nah.MediaRel(id, p.upload(t, ann, pic))
	vrel := nah.MediaRel(bob, p.tusUpload(t, bobToken, video))
	p.kill(t)
	if mt.mirrored(t, rel) != nil || mt.mirrored(t, vrel) != nil {
		t.Fatal("the media were mirrored before the kill: the test proves nothing")
	}
	// While the server is down, ann is imported again as ann2 by the
	// command line, photo and all.
	irel := importCopy(t, data, mt, id, "ann2")

	p = start(t, data, mt.serverEnv()...)
	started := time.Now()
	for time.Since(started) < backup.MediaMirrorQuiet/2 && (mt.mirrored(t, rel) == nil || mt.mirrored(t, vrel) == nil || mt.mirrored(t, irel) == nil) {
		time.Sleep(100 * time.Millisecond)
	}
	if got := mt.mirrored(t, irel); !bytes.Equal(got, pic) {
		t.Errorf("the photo of a person imported while the server was down is not on the target after its start (%d bytes there)", len(got))
	}
	if got := mt.mirrored(t, rel); !bytes.Equal(got, pic) {
		t.Errorf("the photo uploaded before the kill is not on the target %v after the next start (%d bytes there)", time.Since(started).Round(100*time.Millisecond), len(got))
	} else {
		t.Logf("the photo uploaded before the kill was on the target %v after the next start", time.Since(started).Round(100*time.Millisecond))
	}
	if got := mt.mirrored(t, vrel); !bytes.Equal(got, video) {
		t.Errorf("the resumable upload finished before the kill is not on the target after the next start (%d bytes there)", len(got))
	}
	if marks, _ := os.ReadDir(filepath.Join(data, filepath.FromSlash(nah.MediaQueueRel))); len(marks) != 0 {
		t.Errorf("%d people still marked waiting once mirrored", len(marks))
	}

	pic2 := photo(100 << 10)
	rel2 := nah.MediaRel(id, p.upload(t, ann, pic2))
	p.stop(t)
	if got := mt.mirrored(t, rel2); !bytes.Equal(got, pic2) {
		t.Errorf("the photo uploaded before a SIGTERM is not on the target once the server exited (%d bytes there)", len(got))
	}
}
