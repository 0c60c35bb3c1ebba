package backup_test

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/internal/tests3"
	"github.com/nah-app/nah/store"
)

// TestS3MirrorsMediaInPages: the sweep's mirror of a person with more media
// than one page of S3's listing (1,000 keys) copies each once: a second
// sweep finds every one on the bucket, across pages, and copies none; it
// removes a media deleted since, one the store never had and a name that
// is no media id, and the bucket then holds exactly the person's media.
func TestS3MirrorsMediaInPages(t *testing.T) {
	if testing.Short() {
		t.Skip("uploads 1,005 media")
	}
	srv := tests3.Start(t)
	tg := s3Target(t, srv, "mm", "")
	ctx := context.Background()
	s, err := store.Open(ctx, store.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, err := s.CreatePerson(ctx, store.NewPerson{Handle: "ann", PasswordHash: "x"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1_005
	var ids []string
	for i := range n {
		up, err := s.StartUpload(ctx, p.ID, 1<<40)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Fprintf(up, "media %d", i); err != nil {
			t.Fatal(err)
		}
		m, err := up.Commit(ctx, "image/png")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	sweep := func() backup.SweepResult {
		t.Helper()
		res, err := (&backup.Sweeper{Target: tg, Keep: 7, Source: s}).Run(ctx, time.Now())
		if err != nil || len(res.Failed) > 0 {
			t.Fatalf("sweep: %+v %v", res, err)
		}
		return res
	}
	if res := sweep(); res.MediaCopied != n {
		t.Fatalf("first sweep copied %d media, want %d", res.MediaCopied, n)
	}

	if err := s.DeleteMedia(ctx, p.ID, ids[0]); err != nil {
		t.Fatal(err)
	}
	dir := path.Join("mm", "media", nah.MediaDirRel(p.ID))
	for _, name := range []string{nah.NewMediaID(1), "junk"} {
		if _, err := srv.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(tests3.Bucket), Key: aws.String(path.Join(dir, name)), Body: bytes.NewReader([]byte("stale"))}); err != nil {
			t.Fatal(err)
		}
	}
	if res := sweep(); res.MediaCopied != 0 {
		t.Errorf("second sweep copied %d media, want 0: every one was on the bucket", res.MediaCopied)
	}
	got, err := backup.MediaFiles(ctx, tg)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, id := range ids[1:] {
		want = append(want, nah.MediaRel(p.ID, id))
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("the bucket mirrors %d media, want the person's %d", len(got), len(want))
	}
	if keys, err := srv.List(ctx, path.Join(dir, "junk")); err != nil || len(keys) != 0 {
		t.Errorf("a name that is no media id is still on the bucket: %v %v", keys, err)
	}
}
