package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/nah-app/nah"
)

// seedMedia gives owner n media files of size bytes each, their rows in one
// transaction and their files written without fsync: a fixture of tens of
// thousands of media in seconds, where uploads fsync each one. The usage is
// read again at its next use. It returns the ids.
func seedMedia(t testing.TB, s *Store, owner string, n, size int) []string {
	t.Helper()
	ctx := context.Background()
	dir, err := s.mediaDir(owner)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, privateDir); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	body := make([]byte, size)
	for i := range body {
		body[i] = byte(i)
	}
	h := sha256.Sum256(body)
	sum := hex.EncodeToString(h[:])
	at := s.now().UnixMilli() - int64(n)
	err = s.withUsage(ctx, owner, func(u *mediaUsage) error {
		defer func() { u.loaded = false }()
		return s.useFile(ctx, owner, true, func(f *personFile) error {
			tx, err := f.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			for i := range ids {
				ids[i] = nah.NewMediaID(at + int64(i))
				if err := os.WriteFile(filepath.Join(dir, ids[i]), body, privateFile); err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, `INSERT INTO media(id, size, sha256, content_type, created_at) VALUES (?, ?, ?, 'image/jpeg', ?)`,
					ids[i], size, sum, at+int64(i)); err != nil {
					return err
				}
			}
			return tx.Commit()
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// mediaRows counts owner's media rows.
func mediaRows(t testing.TB, s *Store, owner string) (n int) {
	t.Helper()
	err := s.useFile(context.Background(), owner, false, func(f *personFile) error {
		return f.db.QueryRow(`SELECT count(*) FROM media`).Scan(&n)
	})
	if err != nil && err != sql.ErrNoRows {
		t.Fatal(err)
	}
	return n
}

// TestMediaSweepInBatches: loading a person's usage counts their rows in
// SQL and sweeps their folder a batch of names at a time: with several
// batches of media and of files without a row (a crash between a delete's
// row and its file, or an upload's rename and its row), every orphan and
// temporary file goes, every media stays, and the usage is the rows'.
func TestMediaSweepInBatches(t *testing.T) {
	s := MustOpen(t, Config{})
	ann := mustPerson(t, s, "ann")
	ids := seedMedia(t, s, ann.ID, 3*sweepBatch+7, 10)
	dir, _ := s.mediaDir(ann.ID)
	var orphans []string
	for i := range 2*sweepBatch + 3 {
		id := nah.NewMediaID(s.now().UnixMilli() + int64(i))
		orphans = append(orphans, id)
		if err := os.WriteFile(filepath.Join(dir, id), []byte("left"), privateFile); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{uploadPrefix + "1.tmp", uploadPrefix + "2.tmp"} {
		orphans = append(orphans, n)
		os.WriteFile(filepath.Join(dir, n), []byte("cut"), privateFile)
	}
	st, err := s.StorageOf(t.Context(), ann.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.MediaCount != len(ids) || st.Media != int64(10*len(ids)) {
		t.Errorf("storage %+v, want %d media of %d bytes", st, len(ids), 10*len(ids))
	}
	left := 0
	for _, o := range orphans {
		if _, err := os.Stat(filepath.Join(dir, o)); err == nil {
			left++
		}
	}
	if left > 0 {
		t.Errorf("%d of %d files without a row are still there", left, len(orphans))
	}
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join(dir, id)); err != nil {
			t.Fatalf("media %s went: %v", id, err)
		}
	}
	if n := mediaRows(t, s, ann.ID); n != len(ids) {
		t.Errorf("%d rows, want %d", n, len(ids))
	}
}
