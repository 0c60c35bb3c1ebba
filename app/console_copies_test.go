package app

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah/store"
	"github.com/nah-app/nah/ui"
)

// TestNightlyCopiesListAndDownload: the Backups page lists the nightly
// copies on the target newest first, with their size and whether each is
// complete or cut short; a complete one downloads (the full backup's
// headers) as a data directory a store opens, with the people's moments
// and photos as the sweep copied them; a copy changed on the target since
// breaks the download instead of giving a whole-looking archive; a cut
// short or unknown copy is a page, not a download.
func TestNightlyCopiesListAndDownload(t *testing.T) {
	rs := newReplicatedServer(t)
	ctx := context.Background()
	ann := rs.signup(t, "ann")
	rs.post(t, ann, []byte("one"))
	rs.post(t, ann, []byte("two"))
	photo := bytes.Repeat([]byte("a photo "), 1024)
	media := rs.testServer.mustUpload(t, ann, photo)
	first, err := rs.backups.Sweep.Run(ctx, time.Now().Add(-2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	rs.post(t, ann, []byte("three"))
	second, err := rs.backups.Sweep.Run(ctx, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// What a sweep stopped by a shutdown leaves: copies without a manifest.
	cut := time.Now().Add(-30 * time.Minute).UTC().Format("20060102T150405Z")
	cutFile := filepath.Join(rs.replicaDir, "sweeps", cut, "directory.db")
	if err := os.MkdirAll(filepath.Dir(cutFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cutFile, bytes.Repeat([]byte{1}, 3000), 0o600); err != nil {
		t.Fatal(err)
	}

	c := signedInAdmin(t, rs.testServer)
	p := get(t, c, rs.URL+"/console/backups")
	if p.status != 200 {
		t.Fatalf("backups: %d", p.status)
	}
	doc := parseConsole(t, p.body)
	rows := doc.find("data-testid", "copy")
	var got []string
	for _, r := range rows {
		stamp, _ := attr(r, "data-stamp")
		line := []string{stamp}
		for td := range r.ChildNodes() {
			line = append(line, text(td))
		}
		got = append(got, strings.Join(line, " | "))
	}
	when := func(t time.Time) string { return ui.When(t.UnixMilli()) }
	if len(rows) != 3 {
		t.Fatalf("listed %d copies, want 3: %q", len(rows), got)
	}
	cutStarted, _ := time.Parse("20060102T150405Z", cut)
	wantRows := []string{
		cut + " | " + when(cutStarted) + " | " + ui.Bytes(3000) + " | 1 | cut short: never used to restore | ",
		second.Stamp + " | " + when(second.Started) + " | " + ui.Bytes(second.Bytes) + " | " + strconv.Itoa(second.Files) + " | complete | Download",
		first.Stamp + " | " + when(first.Started) + " | " + ui.Bytes(first.Bytes) + " | " + strconv.Itoa(first.Files) + " | complete | Download",
	}
	if !slices.Equal(got, wantRows) {
		t.Fatalf("the copies listed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantRows, "\n"))
	}
	links := doc.find("data-testid", "copy-download")
	if len(links) != 2 {
		t.Fatalf("%d download links, want one for each complete copy", len(links))
	}
	href, _ := attr(links[1], "href")
	if href != "/console/backups/copies/"+first.Stamp {
		t.Fatalf("the first copy's link: %q", href)
	}

	// The older copy, downloaded, is ann as she was then: two moments and
	// her photo; the newer sweep's third moment is not in it.
	res, err := c.Get(rs.URL + href)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/gzip" || res.Header.Get("Cache-Control") != "no-store" ||
		res.Header.Get("Content-Disposition") != `attachment; filename="nah-copy-`+first.Stamp+`.tar.gz"` {
		t.Fatalf("download: %d %v", res.StatusCode, res.Header)
	}
	out := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(out, 0o700); err != nil {
		t.Fatal(err)
	}
	files := untarTo(t, res.Body, out)
	res.Body.Close()
	mediaRel := "people/" + ann.id + "/media/" + media.ID
	slices.Sort(files)
	if wantFiles := []string{"directory.db", "people/" + ann.id + "/media/" + media.ID, "people/" + ann.id + "/person.db"}; !slices.Equal(files, wantFiles) {
		t.Fatalf("the copy holds %v, want %v", files, wantFiles)
	}
	if b, err := os.ReadFile(filepath.Join(out, filepath.FromSlash(mediaRel))); err != nil || !bytes.Equal(b, photo) {
		t.Fatalf("the photo in the copy: %d bytes, %v", len(b), err)
	}
	restored, err := store.Open(ctx, store.Config{Dir: out})
	if err != nil {
		t.Fatalf("the downloaded copy does not open: %v", err)
	}
	n, err := restored.MomentCount(ctx, ann.id)
	restored.Close()
	if err != nil || n != 2 {
		t.Fatalf("ann in the first copy: %d moments, %v; want 2", n, err)
	}
	if h := send(t, c, mustRequest(t, "HEAD", rs.URL+href)); h.status != 200 || h.header.Get("Content-Type") != "application/gzip" {
		t.Fatalf("HEAD: %d %v", h.status, h.header)
	}

	// Changed on the target since: the download breaks.
	onTarget := filepath.Join(rs.replicaDir, "sweeps", second.Stamp, "people", ann.id, "person.db")
	b, err := os.ReadFile(onTarget)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff
	if err := os.WriteFile(onTarget, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// (The connection is cut: before the answer's first bytes left, or
	// in its body.)
	if res, err = c.Get(rs.URL + "/console/backups/copies/" + second.Stamp); err == nil {
		_, err = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if err == nil {
			t.Fatalf("a copy changed on the target downloaded whole: %d", res.StatusCode)
		}
	}

	// A cut-short copy and an unknown one are pages that say so.
	for _, stamp := range []string{cut, "20200101T000000Z", "..%2f..%2fetc"} {
		p := get(t, c, rs.URL+"/console/backups/copies/"+stamp)
		msg := text(parseConsole(t, p.body).byID("error"))
		if p.status != http.StatusNotFound || !strings.HasPrefix(p.header.Get("Content-Type"), "text/html") || !strings.HasPrefix(msg, "There is no complete nightly copy") {
			t.Errorf("copy %s: %d %s %q", stamp, p.status, p.header.Get("Content-Type"), msg)
		}
	}
}

func mustRequest(t *testing.T, method, u string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
