package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nah-app/nah"
)

// seedMedia gives owner n media files of size bytes each, their rows in one
// transaction and their files hard links of one, without fsync: a fixture
// of tens of thousands of media in seconds, where uploads fsync each one. The usage is
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
	// Links of a few files: a tenth of the time of writing each. 30,000
	// a file leaves room under ext4's 65,000 links for an export's own.
	var src string
	tmp := t.TempDir()
	err = s.withUsage(ctx, owner, func(u *mediaUsage) error {
		defer func() { u.loaded, u.counted = false, false }()
		return s.useFile(ctx, owner, true, func(f *personFile) error {
			tx, err := f.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			for i := range ids {
				ids[i] = nah.NewMediaID(at + int64(i))
				if i%30_000 == 0 {
					src = filepath.Join(tmp, strconv.Itoa(i))
					if err := os.WriteFile(src, body, privateFile); err != nil {
						return err
					}
				}
				if err := os.Link(src, filepath.Join(dir, ids[i])); err != nil {
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

// TestMediaCountBound: a person at nah.MaxMediaCount media can start no
// upload, one-request or resumable (QuotaExceeded), whatever their quota;
// after a delete, an upload in flight and an unfinished resumable one each
// hold the one place left, and finishing the resumable one takes it.
func TestMediaCountBound(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 100,000 files")
	}
	ctx := t.Context()
	s := MustOpen(t, Config{})
	ann := mustPerson(t, s, "ann")
	ids := seedMedia(t, s, ann.ID, nah.MaxMediaCount, 1)
	const quota = 1 << 40
	spec := ResumableSpec{Length: 1, ContentType: "image/png"}
	full := func(what string, err error) {
		t.Helper()
		if nah.ErrorCode(err) != nah.QuotaExceeded {
			t.Fatalf("%s at %d media: %v, want QuotaExceeded", what, nah.MaxMediaCount, err)
		}
	}
	_, err := s.StartUpload(ctx, ann.ID, quota)
	full("an upload", err)
	_, _, err = s.Resumables().Create(ctx, ann.ID, spec, quota)
	full("a resumable upload", err)

	if err := s.DeleteMedia(ctx, ann.ID, ids[0]); err != nil {
		t.Fatal(err)
	}
	up, err := s.StartUpload(ctx, ann.ID, quota)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Resumables().Create(ctx, ann.ID, spec, quota)
	full("a resumable upload beside one in flight", err)
	up.Abort()
	r, _, err := s.Resumables().Create(ctx, ann.ID, spec, quota)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.StartUpload(ctx, ann.ID, quota)
	full("an upload beside an unfinished resumable one", err)
	if r, err = s.Resumables().Write(ctx, ann.ID, r.ID, Piece{Offset: 0, Body: strings.NewReader("x")}); err != nil || r.MediaID == "" {
		t.Fatalf("finish the resumable upload: %+v %v", r, err)
	}
	st, err := s.StorageOf(ctx, ann.ID)
	if err != nil || st.MediaCount != nah.MaxMediaCount {
		t.Fatalf("storage %+v %v, want %d media", st, err, nah.MaxMediaCount)
	}
	_, err = s.StartUpload(ctx, ann.ID, quota)
	full("an upload after the resumable one finished", err)
}

// TestReconcileMediaInPages: after a restore, rows whose file is gone (or
// of another size) are deleted a page of rows at a time: with several
// pages of them, every such row goes, every other row stays, and the usage
// is what is left.
func TestReconcileMediaInPages(t *testing.T) {
	ctx := t.Context()
	s := MustOpen(t, Config{})
	ann := mustPerson(t, s, "ann")
	ids := seedMedia(t, s, ann.ID, 3*sweepBatch+5, 10)
	dir, _ := s.mediaDir(ann.ID)
	kept := 0
	for i, id := range ids {
		switch i % 3 {
		case 0:
			os.Remove(filepath.Join(dir, id))
		case 1:
			kept++
		case 2:
			if i%6 == 5 {
				// Another file, not a truncate: the fixture's files are links of one.
				os.Remove(filepath.Join(dir, id))
				os.WriteFile(filepath.Join(dir, id), []byte("abc"), privateFile)
			} else {
				kept++
			}
		}
	}
	err := s.withUsage(ctx, ann.ID, func(u *mediaUsage) error { return s.reconcileMedia(ctx, ann.ID, u) })
	if err != nil {
		t.Fatal(err)
	}
	if n := mediaRows(t, s, ann.ID); n != kept {
		t.Errorf("%d rows left, want the %d with their file", n, kept)
	}
	if st, err := s.StorageOf(ctx, ann.ID); err != nil || st.MediaCount != kept || st.Media != int64(10*kept) {
		t.Errorf("storage %+v %v, want %d media of 10 bytes", st, err, kept)
	}
}
