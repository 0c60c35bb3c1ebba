package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nah-app/nah"
)

// TestImportHostileMLS: an export's MLS tables are read as untrusted input:
// too many rows, a value over its bound or of the wrong type is refused
// with a clear error; a good export with a group, clients, KeyPackages and
// a key log imports.
func TestImportHostileMLS(t *testing.T) {
	ctx := context.Background()
	old := MustOpen(t, Config{})
	ann := mustPerson(t, old, "ann")
	key := bytes.Repeat([]byte{7}, 32)
	c, err := old.AddClient(ctx, ann.ID, "phone", key)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := old.AddKeyPackages(ctx, ann.ID, c.ID, []KeyPackageUpload{{Body: []byte{1, 2}, SignatureKey: key}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := old.CreateGroup(ctx, ann.ID, c.ID); err != nil {
		t.Fatal(err)
	}
	_, files := untar(t, bytes.NewReader(exportOf(t, old, ann.ID)))
	db := files["person.db"]
	var m Manifest
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil {
		t.Fatal(err)
	}
	altered := func(sql string) []byte {
		p := filepath.Join(t.TempDir(), "person.db")
		if err := os.WriteFile(p, db, 0o600); err != nil {
			t.Fatal(err)
		}
		w, err := openDB(p, false, 1, personCacheKiB, SyncFull, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Exec(sql); err != nil {
			t.Fatal(err)
		}
		w.Close()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		mf := m
		mf.Files = []ManifestFile{{Name: m.Files[0].Name, Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}}
		mj, _ := json.Marshal(mf)
		return makeTar(t, reg("person.db", b), reg("manifest.json", mj))
	}
	s := MustOpen(t, Config{})
	for _, tc := range []struct{ name, sql, message string }{
		{"nine clients", `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 8)
			INSERT INTO mls_clients SELECT substr(id, 1, 29) || printf('%016x', i), signature_key, name, created_at FROM mls_clients, n`, "mls_clients has more than 8 rows"},
		{"a KeyPackage over 16 KiB", `UPDATE mls_key_packages SET body = zeroblob(16385)`, "mls_key_packages.body of 16385 bytes"},
		{"a commit of text", `INSERT INTO mls_commits VALUES (1, 'x', 0)`, "table mls_commits is not one this server writes"},
		{"a key log hash cut short", `UPDATE mls_key_log SET hash = substr(hash, 1, 31)`, "table mls_key_log is not one this server writes"},
		{"a negative epoch", `UPDATE mls_group SET epoch = -1`, "table mls_group is not one this server writes"},
		{"a member's epoch passed of text", `UPDATE mls_members SET passed = 'x'`, "table mls_members is not one this server writes"},
		{"a GroupInfo over 512 KiB", `UPDATE mls_group SET group_info = zeroblob(524289)`, "mls_group.group_info of 524289 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.ImportPerson(ctx, bytes.NewReader(altered(tc.sql)), ImportOptions{})
			if nah.ErrorCode(err) != nah.Invalid || !strings.Contains(err.Error(), tc.message) {
				t.Errorf("import: %v, want invalid_export with %q", err, tc.message)
			}
		})
	}
	if _, err := s.ImportPerson(ctx, bytes.NewReader(altered(`SELECT 1`)), ImportOptions{}); err != nil {
		t.Errorf("the export itself: %v", err)
	}
}
