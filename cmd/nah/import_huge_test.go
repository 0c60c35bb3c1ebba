package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah/store"
)

// TestImportHugeIdempotencyValue: a person.db whose idempotency table (one
// the import does not copy) holds a 300 MB answer, or a 50 MB key, is
// refused over the console's form with a 400 naming the value, and the
// server's peak resident memory does not grow by the value: every column
// of every table is bounded before SQLite's integrity check reads its rows
// whole (before: 201 and VmHWM from 23 to 318 MB).
func TestImportHugeIdempotencyValue(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 300 MB export")
	}
	valid := importKinds(t)["valid"]
	cases := []struct {
		name, stmt, want string
	}{
		{"50 MB key", `INSERT INTO idempotency VALUES (printf('%.*c', 50000000, 'k'), x'00', x'00', 1)`, "idempotency.key of 50000000 bytes"},
		{"300 MB answer", `INSERT INTO idempotency VALUES ('k', x'00', zeroblob(300000000), 1)`, "idempotency.answer of 300000000 bytes"},
	}
	files := make([]string, len(cases))
	for i, c := range cases {
		files[i] = exportFileWith(t, valid, c.stmt)
	}
	dir := t.TempDir()
	consoleAdmin(t, dir)
	p := start(t, dir)
	c := consoleSignIn(t, p)
	base := vmHWM(p.cmd.Process.Pid)
	for i, cs := range cases {
		t0 := time.Now()
		st, body := consoleImportFile(t, c, p, files[i])
		peak := vmHWM(p.cmd.Process.Pid)
		t.Logf("%s: %d in %s, VmHWM %d MB (%d MB before the imports)", cs.name, st, time.Since(t0).Round(time.Millisecond), peak>>20, base>>20)
		if st != 400 || !strings.Contains(body, cs.want) {
			t.Errorf("%s: %d, want 400 naming %q\n%.2000s", cs.name, st, cs.want, body)
		}
		if peak > base+32<<20 {
			t.Errorf("%s: VmHWM %d MB, %d MB before the imports: the value was read", cs.name, peak>>20, base>>20)
		}
	}
	if st, _ := consoleImportFile(t, c, p, exportFileWith(t, valid)); st != 201 {
		t.Fatalf("the honest export after them: %d", st)
	}
}

// consoleAdmin makes the console admin consoleSignIn signs in, in the data
// directory dir of a server not started yet.
func consoleAdmin(t *testing.T, dir string) {
	t.Helper()
	ctx := context.Background()
	s, err := store.Open(ctx, store.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	link, err := s.CreateLink(ctx, store.LinkAdmin, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	hash, _ := store.HashPassword("admin-password", 4)
	if _, err := s.Admins().CreateWithLink(ctx, link, "root", hash); err != nil {
		t.Fatal(err)
	}
}

// exportFileWith writes the export tarball, with stmts run on its
// person.db and its manifest made to match, to a file, streaming: the
// test's own memory holds no value of the file.
func exportFileWith(t *testing.T, tarball []byte, stmts ...string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(tarball))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if files[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
	dbPath := filepath.Join(dir, "person.db")
	if err := os.WriteFile(dbPath, files["person.db"], 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", dbPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	size, err := io.Copy(h, f)
	if err != nil {
		t.Fatal(err)
	}
	var m store.Manifest
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil {
		t.Fatal(err)
	}
	m.Files[0].Size, m.Files[0].SHA256 = size, hex.EncodeToString(h.Sum(nil))
	manifest, _ := json.Marshal(m)
	out := filepath.Join(dir, "export.tar")
	o, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	tw := tar.NewWriter(o)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "person.db", Mode: 0o600, Size: size})
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(tw, f); err != nil {
		t.Fatal(err)
	}
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "manifest.json", Mode: 0o600, Size: int64(len(manifest))})
	tw.Write(manifest)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	os.Remove(dbPath)
	return out
}

// consoleImportFile sends the console's import form with the tar at file,
// streamed, and returns the status and the page (its first 64 KiB).
func consoleImportFile(t *testing.T, c *http.Client, p *proc, file string) (int, string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		fw, err := mw.CreateFormFile("export", "export.tar")
		if err == nil {
			_, err = io.Copy(fw, f)
		}
		pw.CloseWithError(errors.Join(err, mw.Close()))
	}()
	req, _ := http.NewRequest("POST", "http://"+p.addr+"/console/people/import", pr)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	cl := *c
	cl.Timeout = 2 * time.Minute
	res, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	return res.StatusCode, string(b)
}
