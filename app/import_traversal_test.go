package app

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
)

// TestImportMediaEntryOutsideItsFolder: a media entry whose name climbs
// out of media/ (media/../../x, listed in the manifest with its true size
// and sha256, so that only its name is wrong) is refused with a 400 that
// names the entry, and nothing is written outside the import's temporary
// folder: no x in the data directory or above it, no person.
func TestImportMediaEntryOutsideItsFolder(t *testing.T) {
	honest := exportedTar(t)
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(honest))
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
	payload := []byte("written where it should not be")
	sum := sha256.Sum256(payload)
	ts := newTestServer(t)
	c := signedInAdmin(t, ts)
	for _, name := range []string{"media/../../x", "media/../x", "media//x", "media/./x"} {
		var m store.Manifest
		if err := json.Unmarshal(files["manifest.json"], &m); err != nil {
			t.Fatal(err)
		}
		m.Files = append(m.Files, store.ManifestFile{Name: name, Size: int64(len(payload)), SHA256: hex.EncodeToString(sum[:])})
		manifest, _ := json.Marshal(m)
		var out bytes.Buffer
		tw := tar.NewWriter(&out)
		for _, e := range []struct {
			name string
			b    []byte
		}{{"person.db", files["person.db"]}, {name, payload}, {"manifest.json", manifest}} {
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: 0o600, Size: int64(len(e.b))})
			tw.Write(e.b)
		}
		tw.Close()
		p := postImport(t, c, ts, "", out.Bytes())
		if p.status != 400 || !strings.Contains(p.body, "unexpected entry") {
			t.Errorf("%s: %d, want 400 naming the entry\n%.1500s", name, p.status, p.body)
		}
		for _, dir := range []string{ts.dir, filepath.Dir(ts.dir), filepath.Join(ts.dir, "people")} {
			if _, err := os.Lstat(filepath.Join(dir, "x")); err == nil {
				t.Errorf("%s: the import wrote %s", name, filepath.Join(dir, "x"))
				os.Remove(filepath.Join(dir, "x"))
			}
		}
		if _, _, err := ts.store.FindPersonByHandle(context.Background(), "ann"); nah.ErrorCode(err) != nah.NotFound {
			t.Fatalf("%s: ann exists after the import: %v", name, err)
		}
	}
}

// TestImportQuotaCountsTheDatabase: an export whose person.db alone holds
// more than the quota (40 moments of 60 KB under 1 MiB, no media) is
// refused as over the quota, and the data directory keeps nothing of it;
// the same export imports on a server whose quota it fits.
func TestImportQuotaCountsTheDatabase(t *testing.T) {
	body := bytes.Repeat([]byte{0xa5}, 60_000)
	big := alteredTar(t, exportedTar(t), momentsRows(40, `INSERT INTO moments(id, created_at, body) VALUES (?, ?, x'`+hex.EncodeToString(body)+`')`))
	const quota = 1 << 20
	ts := newTestServer(t, func(c *serverConfig) { c.QuotaBytes = quota })
	c := signedInAdmin(t, ts)
	before := dirBytes(t, ts.dir)
	p := postImport(t, c, ts, "", big)
	if p.status != 413 || !strings.Contains(p.body, "quota") {
		t.Errorf("a tar of %d bytes under a quota of %d: %d, want 413 naming the quota\n%.1500s", len(big), quota, p.status, p.body)
	}
	if _, _, err := ts.store.FindPersonByHandle(context.Background(), "ann"); nah.ErrorCode(err) != nah.NotFound {
		t.Fatalf("ann exists after an import over the quota: %v", err)
	}
	if grew := dirBytes(t, ts.dir) - before; grew > 256<<10 {
		t.Errorf("the data directory grew by %d bytes", grew)
	}
	roomy := newTestServer(t)
	if p := postImport(t, signedInAdmin(t, roomy), roomy, "", big); p.status != 201 {
		t.Errorf("the same tar under the default quota: %d\n%.1500s", p.status, p.body)
	}
}
