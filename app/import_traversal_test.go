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
