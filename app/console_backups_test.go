package app

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/internal/testutil"
	"github.com/nah-app/nah/store"
)

// replicatedServer is a test server that replicates to a real directory,
// wired as cmd/nah wires it (startReplication, startBackups) without the
// background loop: tests sync and sweep when they mean to.
type replicatedServer struct {
	*testServer
	replicaDir string
	backups    *backup.Backups
}

// takeTargetAway puts a file where the target's folder was, so that even
// root cannot write it. The folder is renamed away first: a sync running
// beside the test may write into it while RemoveAll walks it.
func (rs *replicatedServer) takeTargetAway(t *testing.T) {
	t.Helper()
	for i := 0; ; i++ {
		away := fmt.Sprintf("%s.away%d", rs.replicaDir, i)
		if err := os.Rename(rs.replicaDir, away); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		f, err := os.OpenFile(rs.replicaDir, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			_, err = f.WriteString("not a directory")
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
			return
		}
		if !errors.Is(err, fs.ErrExist) || i == 10 {
			t.Fatal(err)
		}
	}
}

func newReplicatedServer(t *testing.T, edit ...func(*serverConfig)) *replicatedServer {
	t.Helper()
	ctx := context.Background()
	dir, rdir := t.TempDir(), t.TempDir()
	target, err := backup.ParseTarget(rdir, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := target.Init(ctx); err != nil {
		t.Fatal(err)
	}
	meta := filepath.Join(dir, "replication")
	if err := os.MkdirAll(meta, 0o700); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := backup.Open(ctx, backup.Config{Target: target, DataDir: dir, MetaDir: meta, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	// Registered before the server's cleanup, so it runs after the store
	// closed (and unwatched) its files.
	t.Cleanup(func() { r.Close(context.Background()) })
	ts := newTestServer(t, append([]func(*serverConfig){func(c *serverConfig) {
		c.Dir = dir
		c.Replicator, c.MaxWatched = r, 64
	}}, edit...)...)
	if err := r.Watch(ctx, ts.store.Path(nah.DirectoryRel)); err != nil {
		t.Fatal(err)
	}
	b := &backup.Backups{
		Repl: r, Every: 24 * time.Hour, At: 3 * time.Hour, Behind: time.Minute,
		Source: ts.store, Files: ts.store, Log: log,
		Sweep: &backup.Sweeper{Target: target, Keep: 7, Source: ts.store},
	}
	ts.app.cfg.Backups = b // no request has been served yet
	return &replicatedServer{testServer: ts, replicaDir: rdir, backups: b}
}

// postMoment posts through the API without the test's helpers, for the
// goroutines that keep posting: the moment's id, or an error.
func postMoment(base string, c *http.Client, token, body string) (string, error) {
	j, _ := json.Marshal(map[string]string{"body": base64.StdEncoding.EncodeToString([]byte(body))})
	req, _ := http.NewRequest("POST", base+"/api/v1/moments", strings.NewReader(string(j)))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	var out struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != 201 {
		return "", fmt.Errorf("post: %d %v", res.StatusCode, err)
	}
	return out.ID, nil
}

// posters keeps people posting until stop is called, which returns every
// acknowledged moment's id by person and any failure; acks says how many
// posts each person has had acknowledged so far.
func posters(ts *testServer, people []account) (acks func() map[string]int, stop func() (map[string][]string, error)) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := map[string][]string{}
	var firstErr error
	for _, p := range people {
		wg.Go(func() {
			c := ts.Client()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				id, err := postMoment(ts.URL, c, p.token, fmt.Sprintf("%s %d", p.handle, i))
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("%s: %w", p.handle, err)
				} else if err == nil {
					acked[p.id] = append(acked[p.id], id)
				}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	acks = func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		n := map[string]int{}
		for id, ids := range acked {
			n[id] = len(ids)
		}
		return n
	}
	return acks, func() (map[string][]string, error) {
		close(done)
		wg.Wait()
		return acked, firstErr
	}
}

// momentIDs are the ids of every moment in person id's file.
func momentIDs(t *testing.T, s *store.Store, id string) []string {
	t.Helper()
	ms, err := s.Moments(context.Background(), id, nil, 100_000, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		out = append(out, m.ID)
	}
	slices.Sort(out)
	return out
}

// syncNow sends "Sync now" as the console's form does without
// JavaScript, waits for its job to end and returns the page it sent the
// browser to.
func (rs *replicatedServer) syncNow(t *testing.T, c *http.Client) htmlPage {
	t.Helper()
	p := postForm(t, c, rs.URL+"/console/backups/sync", nil)
	if loc := p.header.Get("Location"); p.status != http.StatusSeeOther || !strings.HasPrefix(loc, "/console/backups?m=sync") {
		t.Fatalf("sync now: %d to %q\n%s", p.status, loc, p.body)
	}
	deadline := time.Now().Add(time.Minute)
	for st, _ := rs.backups.SyncState(); st.Running; st, _ = rs.backups.SyncState() {
		if time.Now().After(deadline) {
			t.Fatalf("sync now still running after a minute: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return get(t, c, rs.URL+p.header.Get("Location"))
}

func mustSync(t *testing.T, b *backup.Backups) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.SyncNow(ctx); err != nil {
		t.Fatal(err)
	}
}

// postAroundTime posts n moments as a, syncs, and returns their ids
// (sorted) and a time to restore to: a whole second after every one of them
// reached the target, and 300 ms before this returns, so that whatever is
// posted next is after it.
func (rs *replicatedServer) postAroundTime(t *testing.T, a account, n int) ([]string, time.Time) {
	t.Helper()
	var ids []string
	for i := range n {
		ids = append(ids, rs.post(t, a, fmt.Appendf(nil, "early %d", i)))
	}
	mustSync(t, rs.backups)
	at := time.Now().Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(at.Add(300 * time.Millisecond)))
	slices.Sort(ids)
	return ids, at
}

var fileRowRE = regexp.MustCompile(`(?s)<table id="backup-files">.*?<tbody>(.*?)</tbody>`)

// fileRows counts the rows of the Backups page's file list.
func fileRows(t *testing.T, body string) int {
	t.Helper()
	m := fileRowRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no file list in the page:\n%s", body)
	}
	return strings.Count(m[1], "<tr>")
}

func TestBackupsPageAndOverview(t *testing.T) {
	rs := newReplicatedServer(t)
	var people []account
	for i := range 60 {
		a := rs.signup(t, fmt.Sprintf("p%02d", i))
		rs.post(t, a, []byte("hello"))
		people = append(people, a)
	}
	mustSync(t, rs.backups)
	if _, err := rs.backups.Sweep.Run(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	c := signedInAdmin(t, rs.testServer)

	p := get(t, c, rs.URL+"/console/backups")
	if p.status != 200 {
		t.Fatalf("backups page: %d\n%s", p.status, p.body)
	}
	for _, want := range []string{rs.replicaDir, "61 files, "} {
		if !strings.Contains(p.body, want) {
			t.Errorf("backups page lacks %q", want)
		}
	}
	d := parseConsole(t, p.body)
	if h := text(d.byID("backup-health")); !strings.HasPrefix(h, "Backed up ") || !strings.Contains(h, " to "+rs.replicaDir+". Last nightly copy ") || !strings.HasSuffix(h, "iB.") {
		t.Errorf("backups page's health line: %q", h)
	}
	if h := d.byID("backup-health"); h != nil {
		if role, _ := attr(h, "role"); role != "" {
			t.Errorf("a healthy line has role %q", role)
		}
	}
	if w := text(d.byID("same-disk")); !strings.HasPrefix(w, "The backups are on the same disk as the data.") {
		t.Errorf("no same-disk warning: %q", w)
	}
	if cmd := text(d.byID("restore-command")); !strings.HasPrefix(cmd, "nah restore -from "+rs.replicaDir+" -to ") {
		t.Errorf("restore command: %q", cmd)
	}
	for _, id := range []string{"sync-now", "download-all"} {
		if d.byID(id) == nil {
			t.Errorf("backups page has no #%s", id)
		}
	}
	// 60 people and the directory: two pages, 50 and 11 rows, each
	// person named by handle; a page past the end shows the last.
	if n := fileRows(t, p.body); n != backupFilesPerPage {
		t.Errorf("page 1: %d rows", n)
	}
	p2 := get(t, c, rs.URL+"/console/backups?page=2")
	if n := fileRows(t, p2.body); n != 11 {
		t.Errorf("page 2: %d rows", n)
	}
	if p9 := get(t, c, rs.URL+"/console/backups?page=9"); fileRows(t, p9.body) != 11 || !strings.Contains(p9.body, "page 2 of 2") {
		t.Errorf("page past the end is not the last")
	}
	for _, a := range people {
		link := `<a href="/console/people/` + a.id + `">` + a.handle + `</a>`
		if !strings.Contains(p.body, link) && !strings.Contains(p2.body, link) {
			t.Errorf("%s is not listed by handle", a.handle)
		}
	}

	if h := text(parseConsole(t, get(t, c, rs.URL+"/console").body).byID("backup-health")); !strings.HasPrefix(h, "Backed up ") {
		t.Errorf("the overview's backup health: %q", h)
	}
	h := rs.do(t, "GET", "/healthz", "", nil)
	rep, _ := h.json["replication"].(map[string]any)
	if h.status != 200 || h.str("status") != "ok" || rep["status"] != "ok" {
		t.Errorf("healthz: %d %s", h.status, h.raw)
	}

	// Sync now, and its refusal from another origin.
	if s := rs.syncNow(t, c); s.status != 200 || !strings.Contains(s.body, "Synced in") {
		t.Errorf("sync now: %d", s.status)
	}
	if s := postForm(t, c, rs.URL+"/console/backups/sync", nil, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"); s.status != http.StatusForbidden {
		t.Errorf("cross-origin sync now: %d", s.status)
	}
	if p := get(t, consoleClient(t), rs.URL+"/console/backups"); p.status != 303 {
		t.Errorf("signed out: %d", p.status)
	}

	var metrics strings.Builder
	rs.app.writePrometheus(&metrics)
	for _, want := range []string{"nah_replica_files_watched ", "nah_replica_healthy 1", "nah_replica_files_failing 0", "nah_backup_sweep_bytes "} {
		if !strings.Contains(metrics.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestBackupsBehindHealth: a target that cannot be written makes health
// degraded (200, with the error), the overview and the page say so, and
// posts go on; once the target is back, sync catches up.
func TestBackupsBehindHealth(t *testing.T) {
	rs := newReplicatedServer(t)
	ann := rs.signup(t, "ann")
	rs.post(t, ann, []byte("before"))
	mustSync(t, rs.backups)
	c := signedInAdmin(t, rs.testServer)

	// A file where the target's directory was: even root cannot write it.
	rs.takeTargetAway(t)
	start := time.Now()
	rs.post(t, ann, []byte("while the target is away"))
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a post took %s while the target was away", d)
	}
	s := rs.syncNow(t, c)
	if s.status != 200 || !strings.Contains(s.body, "Sync failed") || !strings.Contains(s.body, `id="backup-files"`) {
		t.Errorf("sync now with the target away: %d\n%s", s.status, s.body)
	}
	h := rs.do(t, "GET", "/healthz", "", nil)
	rep, _ := h.json["replication"].(map[string]any)
	if h.status != 200 || h.str("status") != "degraded" || rep["status"] != "behind" || rep["error"] == "" || strings.Contains(string(h.raw), ann.id) ||
		strings.Contains(string(h.raw), rs.dir) || strings.Contains(string(h.raw), rs.replicaDir) {
		t.Errorf("healthz with the target away: %d %s", h.status, h.raw)
	}
	if o := get(t, c, rs.URL+"/console"); !strings.Contains(o.body, `id="backup-health" role="alert"`) {
		t.Errorf("the overview does not say replication is behind")
	}
	var metrics strings.Builder
	rs.app.writePrometheus(&metrics)
	if !strings.Contains(metrics.String(), "nah_replica_healthy 0\n") || strings.Contains(metrics.String(), "nah_replica_files_behind 0\n") {
		t.Errorf("metrics do not say replication is behind:\n%s", metrics.String())
	}

	// The target is back.
	if err := os.Remove(rs.replicaDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(rs.replicaDir, 0o700); err != nil {
		t.Fatal(err)
	}
	rs.post(t, ann, []byte("after"))
	mustSync(t, rs.backups)
	if h := rs.do(t, "GET", "/healthz", "", nil); h.str("status") != "ok" {
		t.Errorf("healthz once the target is back: %s", h.raw)
	}
}

// untarTo extracts a .tar.gz into dir, refusing any name that climbs out.
func untarTo(t *testing.T, r io.Reader, dir string) []string {
	t.Helper()
	zr, err := gzip.NewReader(r)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var files []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, dir+string(os.PathSeparator)) {
			t.Fatalf("entry %q climbs out", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o700); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
			files = append(files, h.Name)
		default:
			t.Fatalf("entry %q of type %c", h.Name, h.Typeflag)
		}
	}
}

// TestBackupDownloadWhileWriting: the full backup, downloaded while people
// keep posting, is a data directory whose every file passes SQLite's
// integrity check and that a store opens; it holds every person and every
// moment acknowledged before the download, and nothing the live store
// lacks.
func TestBackupDownloadWhileWriting(t *testing.T) {
	rs := newReplicatedServer(t)
	var people []account
	for i := range 6 {
		a := rs.signup(t, fmt.Sprintf("writer%d", i))
		for j := range 20 {
			rs.post(t, a, fmt.Appendf(nil, "%s %d", a.handle, j))
		}
		people = append(people, a)
	}
	before := map[string][]string{}
	for _, a := range people {
		before[a.id] = momentIDs(t, rs.store, a.id)
	}
	photo := bytes.Repeat([]byte("a photo "), 2048)
	st, media, _ := rs.testServer.upload(t, people[5], photo, "image/jpeg")
	if st != 201 {
		t.Fatalf("upload: %d", st)
	}
	_, stop := posters(rs.testServer, people[:3])
	c := signedInAdmin(t, rs.testServer)
	res, err := c.Get(rs.URL + "/console/backups/download")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/gzip" || !strings.Contains(res.Header.Get("Content-Disposition"), ".tar.gz") {
		t.Fatalf("download: %d %v", res.StatusCode, res.Header)
	}
	out := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(out, 0o700); err != nil {
		t.Fatal(err)
	}
	files := untarTo(t, res.Body, out)
	if _, err := stop(); err != nil {
		t.Fatal(err)
	}
	want, err := rs.store.Databases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mediaRel := "people/" + people[5].id + "/media/" + media.ID
	want = append(want, mediaRel)
	slices.Sort(files)
	slices.Sort(want)
	if !slices.Equal(files, want) {
		t.Fatalf("archive holds %v, the server %v", files, want)
	}
	if got, err := os.ReadFile(filepath.Join(out, filepath.FromSlash(mediaRel))); err != nil || !bytes.Equal(got, photo) {
		t.Fatalf("the media file in the archive: %d bytes, %v; want %d", len(got), err, len(photo))
	}
	for _, f := range files {
		if f == mediaRel {
			continue
		}
		if err := store.IntegrityCheck(context.Background(), filepath.Join(out, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	restored, err := store.Open(context.Background(), store.Config{Dir: out})
	if err != nil {
		t.Fatalf("the extracted backup does not open: %v", err)
	}
	defer restored.Close()
	for _, a := range people {
		if _, err := restored.FindPersonByID(context.Background(), a.id); err != nil {
			t.Errorf("%s: %v", a.handle, err)
		}
		got, live := momentIDs(t, restored, a.id), momentIDs(t, rs.store, a.id)
		for _, id := range before[a.id] {
			if _, ok := slices.BinarySearch(got, id); !ok {
				t.Errorf("%s: moment %s, acknowledged before the download, is not in it", a.handle, id)
			}
		}
		for _, id := range got {
			if _, ok := slices.BinarySearch(live, id); !ok {
				t.Errorf("%s: moment %s is in the backup and not on the server", a.handle, id)
			}
		}
	}
}

// TestBackupRestorePersonToTime: one person restored to a time through the
// console's confirmation step while 8 others keep posting: the person is
// as they were then (moments before it present, after it absent), the
// others lose nothing, and the restored file replicates again.
func TestBackupRestorePersonToTime(t *testing.T) {
	rs := newReplicatedServer(t)
	ann := rs.signup(t, "ann")
	var others []account
	for i := range 8 {
		others = append(others, rs.signup(t, fmt.Sprintf("other%d", i)))
	}
	early, at := rs.postAroundTime(t, ann, 5)
	acks, stop := posters(rs.testServer, others)
	// waitPosts waits until each of the others has had a post acknowledged
	// since counts were taken.
	waitPosts := func(step string, counts map[string]int) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			now, all := acks(), true
			for _, o := range others {
				all = all && now[o.id] > counts[o.id]
			}
			if all {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the others do not all post: %v", step, now)
			}
		}
	}
	waitPosts("before the restore", nil)
	for i := range 5 {
		rs.post(t, ann, fmt.Appendf(nil, "late %d", i))
	}
	mustSync(t, rs.backups)
	if n := len(momentIDs(t, rs.store, ann.id)); n != 10 {
		t.Fatalf("ann has %d moments before the restore", n)
	}

	c := signedInAdmin(t, rs.testServer)
	form := url.Values{"person": {"ann"}, "at": {at.Format("2006-01-02T15:04:05")}}
	confirm := get(t, c, rs.URL+"/console/backups/restore?"+form.Encode())
	if confirm.status != 200 || !strings.Contains(confirm.body, `id="restore-confirm"`) || !strings.Contains(confirm.body, "now 10 moments") {
		t.Fatalf("confirmation: %d\n%s", confirm.status, confirm.body)
	}
	if n := len(momentIDs(t, rs.store, ann.id)); n != 10 {
		t.Fatalf("the confirmation step changed ann: %d moments", n)
	}
	done := postRestore(t, c, rs.URL, ann.id, at.Format(time.RFC3339))
	if done.status != 200 || !strings.Contains(done.body, "from the history") || !strings.Contains(done.body, "5 moments now") {
		t.Fatalf("restore: %d\n%s", done.status, done.body)
	}
	waitPosts("after the restore", acks())
	acked, err := stop()
	if err != nil {
		t.Fatalf("a post failed during the restore: %v", err)
	}
	if got := momentIDs(t, rs.store, ann.id); !slices.Equal(got, early) {
		t.Errorf("ann after the restore has %v, want the early %v", got, early)
	}
	for _, o := range others {
		got := momentIDs(t, rs.store, o.id)
		for _, id := range acked[o.id] {
			if _, ok := slices.BinarySearch(got, id); !ok {
				t.Errorf("%s lost acknowledged moment %s", o.handle, id)
			}
		}
	}
	// Ann posts again; the new file replicates: a restore of the newest
	// state has the early moments and the new one.
	again := rs.post(t, ann, []byte("after the restore"))
	mustSync(t, rs.backups)
	p := filepath.Join(t.TempDir(), "ann.db")
	if _, err := backup.RestoreFile(context.Background(), rs.backups.Repl.Target(), nah.PersonRel(ann.id), p, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := store.IntegrityCheck(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	latest := filepath.Join(t.TempDir(), "data")
	os.MkdirAll(filepath.Join(latest, "people", ann.id), 0o700)
	if err := os.Rename(p, filepath.Join(latest, filepath.FromSlash(nah.PersonRel(ann.id)))); err != nil {
		t.Fatal(err)
	}
	// The directory of the live server, copied, names ann.
	dirCopy, err := rs.store.Backup(context.Background(), nah.DirectoryRel)
	if err != nil {
		t.Fatal(err)
	}
	dst, _ := os.Create(filepath.Join(latest, "directory.db"))
	io.Copy(dst, dirCopy)
	dst.Close()
	dirCopy.Close()
	s2, err := store.Open(context.Background(), store.Config{Dir: latest})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	want := append(slices.Clone(early), again)
	slices.Sort(want)
	if got := momentIDs(t, s2, ann.id); !slices.Equal(got, want) {
		t.Errorf("the replica after the restore has %v, want %v", got, want)
	}
}

// TestBackupRestoreRefusals: a person the replica holds nothing of, a time
// in the future or not a time, and an unknown person are refused with a
// clear sentence, and nothing changes.
func TestBackupRestoreRefusals(t *testing.T) {
	rs := newReplicatedServer(t)
	ann := rs.signup(t, "ann")
	rs.post(t, ann, []byte("one"))
	rs.post(t, ann, []byte("two"))
	mustSync(t, rs.backups)
	before := momentIDs(t, rs.store, ann.id)
	c := signedInAdmin(t, rs.testServer)
	at := time.Now().UTC().Format(time.RFC3339)

	// Never replicated: the server now replicates to a new, empty target.
	empty, err := backup.ParseTarget(t.TempDir(), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	r2, err := backup.Open(context.Background(), backup.Config{Target: empty, DataDir: rs.dir, MetaDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close(context.Background())
	rs.app.cfg.Backups = &backup.Backups{Repl: r2, Behind: time.Minute}
	p := postRestore(t, c, rs.URL, ann.id, at)
	if p.status != 404 || !strings.Contains(p.body, "holds no copy of ann") || !strings.Contains(p.body, "nothing was changed") {
		t.Errorf("restore of a person never replicated: %d\n%s", p.status, p.body)
	}
	if got := momentIDs(t, rs.store, ann.id); !slices.Equal(got, before) {
		t.Errorf("a refused restore changed ann: %v", got)
	}
	rs.post(t, ann, []byte("still posting"))

	for _, tc := range []struct {
		person, at string
		status     int
		says       string
	}{
		{ann.id, time.Now().Add(time.Hour).UTC().Format(time.RFC3339), 400, "in the future"},
		{ann.id, "yesterday", 400, "not a date and time"},
		{"nobody", at, 404, "no such person"},
	} {
		p := postRestore(t, c, rs.URL, tc.person, tc.at)
		if p.status != tc.status || !strings.Contains(p.body, tc.says) {
			t.Errorf("restore %s at %s: %d, want %d saying %q", tc.person, tc.at, p.status, tc.status, tc.says)
		}
	}

	// Replication off: the page says so, the actions are refused.
	rs.app.cfg.Backups = nil
	if p := get(t, c, rs.URL+"/console/backups"); p.status != 200 || !strings.Contains(p.body, "Backups are off") {
		t.Errorf("backups page with replication off: %d", p.status)
	}
	if p := postForm(t, c, rs.URL+"/console/backups/sync", nil); p.status != 404 {
		t.Errorf("sync with replication off: %d", p.status)
	}
	if h := rs.do(t, "GET", "/healthz", "", nil); h.json["replication"] != nil {
		t.Errorf("healthz with replication off: %s", h.raw)
	}
}

// TestBackupRestoreRefusesCorruptHistory: ann's history on the replica is
// one that restores to a corrupt database (the evidence of issue 20). The
// console's restore of ann refuses with a sentence saying so, and, once a
// sound nightly copy older than that history exists, what that copy would
// cost; ann's live file is untouched and she goes on posting.
var tags = regexp.MustCompile(`<[^>]*>`)

func TestBackupRestoreRefusesCorruptHistory(t *testing.T) {
	rs := newReplicatedServer(t)
	ann := rs.signup(t, "ann")
	for i := range 3 {
		rs.post(t, ann, fmt.Appendf(nil, "ann %d", i))
	}
	mustSync(t, rs.backups)
	before := momentIDs(t, rs.store, ann.id)
	rel := nah.PersonRel(ann.id)
	dst := filepath.Join(rs.replicaDir, filepath.FromSlash(rel))
	if err := os.RemoveAll(dst); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(dst, os.DirFS(filepath.Join("..", "backup", "testdata", "replica-corrupt", "replica", "imnketelg6ikmgbpvwmfgun5ty", "person.db"))); err != nil {
		t.Fatal(err)
	}
	testutil.LTXTimes(t, dst)
	c := signedInAdmin(t, rs.testServer)
	restore := func(says ...string) {
		t.Helper()
		at := time.Now().UTC().Format(time.RFC3339)
		p := postRestore(t, c, rs.URL, ann.id, at)
		says = append(says, "does not restore to a sound database", "integrity check", "nothing was changed: ann&#39;s file is as it was")
		plain := tags.ReplaceAllString(p.body, "") // times are <time> elements now
		for _, s := range says {
			if p.status != 503 || !strings.Contains(plain, s) {
				t.Fatalf("restore of ann from a corrupt history: %d, want 503 saying %q\n%s", p.status, s, p.body)
			}
		}
		if got := momentIDs(t, rs.store, ann.id); !slices.Equal(got, before) {
			t.Fatalf("a refused restore changed ann: %v, want %v", got, before)
		}
	}
	restore("No sound nightly copy of it exists either.")

	newest := time.Date(2026, 12, 2, 2, 1, 59, 408e6, time.UTC) // the evidence's last transaction
	if res, err := rs.backups.Sweep.Run(context.Background(), newest.Add(-5*time.Hour-30*time.Minute)); err != nil || len(res.Failed) > 0 {
		t.Fatalf("sweep: %+v %v", res, err)
	}
	restore("The nightly copy of 2026-12-01 20:31:59 UTC is sound but 5 hours 30 minutes older than that history&#39;s newest position (2026-12-02 02:01:59 UTC); it was not used.")
	m := rs.post(t, ann, []byte("still here"))
	if got := momentIDs(t, rs.store, ann.id); len(got) != len(before)+1 || !slices.Contains(got, m) {
		t.Errorf("ann after the refusals: %v", got)
	}
}

// TestRestoredPersonIsReplicated: after a person is restored to a time and
// does not post again, the replica's newest copy of their file is the
// restored one; else a whole-server restore would bring back what the
// restore replaced.
func TestRestoredPersonIsReplicated(t *testing.T) {
	rs := newReplicatedServer(t)
	ann := rs.signup(t, "ann")
	early, at := rs.postAroundTime(t, ann, 5)
	for i := range 5 {
		rs.post(t, ann, fmt.Appendf(nil, "late %d", i))
	}
	mustSync(t, rs.backups)
	c := signedInAdmin(t, rs.testServer)
	if done := postRestore(t, c, rs.URL, ann.id, at.Format(time.RFC3339)); done.status != 200 {
		t.Fatalf("restore: %d", done.status)
	}
	mustSync(t, rs.backups)
	p := filepath.Join(t.TempDir(), "person.db")
	src, err := backup.RestoreFile(context.Background(), rs.backups.Repl.Target(), nah.PersonRel(ann.id), p, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := store.ExportedMoments(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(early) {
		t.Fatalf("the replica's newest copy (from %s) has %d moments; the restored person has %d", src, len(got), len(early))
	}
}

// TestBackupsFailedSyncClears: a "Sync now" that failed while the target
// was away says why in a sentence (the raw error folded beneath it), and
// once the target is back the catch-up loop alone brings the overview and
// /healthz back to healthy, with no second Sync now.
func TestBackupsFailedSyncClears(t *testing.T) {
	rs := newReplicatedServer(t)
	ann := rs.signup(t, "ann")
	rs.post(t, ann, []byte("before"))
	mustSync(t, rs.backups)
	c := signedInAdmin(t, rs.testServer)

	rs.takeTargetAway(t)
	rs.post(t, ann, []byte("while the target is away"))
	if s := rs.syncNow(t, c); s.status != 200 || !strings.Contains(s.body, "a file stands where the folder should be") {
		t.Fatalf("sync now with the target away: %d\n%s", s.status, s.body)
	}
	d := parseConsole(t, get(t, c, rs.URL+"/console").body)
	if p := text(d.byID("backup-problem")); p != "The backup folder cannot be written: a file stands where the folder should be." {
		t.Errorf("the overview says %q of what is wrong", p)
	}
	if raw := d.byID("backup-raw-error"); raw == nil || raw.Parent.Parent.Data != "details" || !strings.Contains(text(raw), "not a directory") {
		t.Errorf("the raw error is not folded in details: %q", text(raw))
	}

	if err := os.Remove(rs.replicaDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(rs.replicaDir, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rs.backups.CatchUpEvery = 100 * time.Millisecond
	done := make(chan struct{})
	go func() { defer close(done); rs.backups.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(15 * time.Second)
	for {
		h := rs.do(t, "GET", "/healthz", "", nil)
		o := get(t, c, rs.URL+"/console")
		if h.str("status") == "ok" && strings.Contains(o.body, "Backed up ") && !strings.Contains(o.body, `id="backup-health" role="alert"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15 s after the target came back, with catch-ups every 100 ms: healthz %s\n%s", h.raw, o.body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestReplicaLagIsTheOldestWriteNotShipped: with the target away, the lag
// that /healthz, the metrics and the Backups page give is the age of the
// oldest acknowledged post the replica lacks, not how long ago its file
// was last in step; once the target is back and the files synced, the lag
// is zero again.
func TestReplicaLagIsTheOldestWriteNotShipped(t *testing.T) {
	rs := newReplicatedServer(t)
	ann := rs.signup(t, "ann")
	rs.post(t, ann, []byte("before"))
	mustSync(t, rs.backups)
	h := rs.do(t, "GET", "/healthz", "", nil)
	rep, _ := h.json["replication"].(map[string]any)
	if rep["worst_lag_seconds"] != 0.0 || rep["files_queued"] != 0.0 {
		t.Fatalf("healthz in step: %s", h.raw)
	}

	// Ann's file was last in step before this pause; the post after it is
	// what the replica lacks, so the lag counts from the post, through the
	// failed sync of the syncers' next tick (a second).
	time.Sleep(2 * time.Second)
	rs.takeTargetAway(t)
	posted := time.Now()
	rs.post(t, ann, []byte("while the target is away"))
	time.Sleep(1500 * time.Millisecond)
	var lag time.Duration
	for _, f := range rs.backups.Status() {
		if f.Path == nah.PersonRel(ann.id) {
			lag = f.Lag(time.Now())
		}
	}
	if since := time.Since(posted); lag < time.Second || lag > since {
		t.Errorf("ann's file lags %s, want the age of the post (%s)", lag, since)
	}
	h = rs.do(t, "GET", "/healthz", "", nil)
	rep, _ = h.json["replication"].(map[string]any)
	if w, _ := rep["worst_lag_seconds"].(float64); w < 1 || rep["status"] != "behind" {
		t.Errorf("healthz with a post not shipped for 1.5 s: %s", h.raw)
	}
	var metrics strings.Builder
	rs.app.writePrometheus(&metrics)
	if !regexp.MustCompile(`(?m)^nah_replica_lag_seconds [1-9]`).MatchString(metrics.String()) {
		t.Errorf("metrics lack a lag of a second or more:\n%s", metrics.String())
	}

	if err := os.Remove(rs.replicaDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(rs.replicaDir, 0o700); err != nil {
		t.Fatal(err)
	}
	mustSync(t, rs.backups)
	h = rs.do(t, "GET", "/healthz", "", nil)
	rep, _ = h.json["replication"].(map[string]any)
	if rep["worst_lag_seconds"] != 0.0 {
		t.Errorf("healthz once every post is shipped: %s", h.raw)
	}
	metrics.Reset()
	rs.app.writePrometheus(&metrics)
	if !strings.Contains(metrics.String(), "nah_replica_lag_seconds 0\n") {
		t.Errorf("metrics once every post is shipped:\n%s", metrics.String())
	}
}
