package backup_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/internal/tests3"
)

// cutShort is a Source whose sweep is stopped (as by a shutdown) once it
// has copied its first database.
type cutShort struct {
	backup.Source
	stop   context.CancelFunc
	copied *int
}

func (c cutShort) Backup(ctx context.Context, rel string) (*os.File, error) {
	if *c.copied++; *c.copied > 1 {
		c.stop()
		return nil, context.Canceled
	}
	return c.Source.Backup(ctx, rel)
}

// TestNightlyCopies, on a folder and on a real S3 server: the sweeps on
// the target are listed newest first with their files and bytes, a cut
// short one as such; a complete one is written as a tar of its databases
// and its people's mirrored media, each database the bytes the sweep
// wrote; a cut-short or unknown stamp is ErrNoCopy.
func TestNightlyCopies(t *testing.T) {
	for _, kind := range []string{"folder", "s3"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			var tg *backup.Target
			if kind == "s3" {
				tg = s3Target(t, tests3.Start(t), "copies", "")
			} else {
				var err error
				if tg, err = backup.ParseTarget(t.TempDir(), os.Getenv); err != nil {
					t.Fatal(err)
				}
				if err := tg.Init(ctx); err != nil {
					t.Fatal(err)
				}
			}
			n := openNode(t, t.TempDir(), tg, nodeOpts{maxOpen: 4, maxWatched: 2})
			id := n.person(t, "pic")
			n.post(t, id, 1)
			up, err := n.s.StartUpload(ctx, id, 1<<30)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := up.Write([]byte("a picture of the sea")); err != nil {
				t.Fatal(err)
			}
			m, err := up.Commit(ctx, "image/png")
			if err != nil {
				t.Fatal(err)
			}
			sw := &backup.Sweeper{Target: tg, Keep: 7, Source: n.s}
			old := time.Now().Add(-time.Hour)
			done, err := sw.Run(ctx, old)
			if err != nil || done.Files != 2 {
				t.Fatalf("sweep: %+v %v", done, err)
			}
			cctx, stop := context.WithCancel(ctx)
			n.person(t, "later") // a third database, which the cut-short sweep never reaches
			cut := &backup.Sweeper{Target: tg, Keep: 7, Source: cutShort{n.s, stop, new(int)}}
			if res, err := cut.Run(cctx, time.Now()); !errors.Is(err, context.Canceled) {
				t.Fatalf("the sweep to cut short: %+v %v", res, err)
			}

			cs, err := sw.Copies(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(cs) != 2 || cs[0].Complete || cs[0].Files != 1 || cs[0].Bytes <= 0 ||
				!cs[1].Complete || cs[1].Stamp != done.Stamp || cs[1].Files != 2 || cs[1].Bytes != done.Bytes || !cs[1].Started.Equal(old.UTC().Truncate(time.Second)) {
				t.Fatalf("copies: %+v; the complete sweep %+v", cs, done)
			}

			var tarball bytes.Buffer
			if err := backup.WriteCopy(ctx, tg, done.Stamp, 2, &tarball); err != nil {
				t.Fatal(err)
			}
			var names []string
			var dbBytes int64
			zr, err := gzip.NewReader(&tarball)
			if err != nil {
				t.Fatal(err)
			}
			tr := tar.NewReader(zr)
			for {
				h, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				names = append(names, h.Name)
				b, _ := io.ReadAll(tr)
				switch h.Name {
				case nah.MediaRel(id, m.ID):
					if string(b) != "a picture of the sea" {
						t.Errorf("the photo in the copy: %q", b)
					}
				case nah.DirectoryRel, nah.PersonRel(id):
					dbBytes += int64(len(b))
				}
			}
			want := []string{"directory.db", "people/", "people/" + id + "/", "people/" + id + "/person.db", "people/" + id + "/media/", nah.MediaRel(id, m.ID)}
			if !slices.Equal(names, want) || dbBytes != done.Bytes {
				t.Fatalf("the copy's tar holds %q (%d database bytes), want %q (%d)", names, dbBytes, want, done.Bytes)
			}
			for _, stamp := range []string{cs[0].Stamp, "20200101T000000Z", "../sweeps"} {
				if err := backup.WriteCopy(ctx, tg, stamp, 2, io.Discard); !errors.Is(err, backup.ErrNoCopy) {
					t.Errorf("WriteCopy(%q): %v, want ErrNoCopy", stamp, err)
				}
				if backup.HasCopy(ctx, tg, stamp, 2) {
					t.Errorf("HasCopy(%q)", stamp)
				}
			}
			if !backup.HasCopy(ctx, tg, done.Stamp, 2) {
				t.Error("HasCopy of the complete copy is false")
			}
		})
	}
}
