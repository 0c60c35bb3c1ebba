package backup_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/internal/tests3"
)

// TestDiskOnS3: on a real S3 server the replica's size is its prefix's
// keys (not another prefix's in the bucket), the nightly copies' part is
// the sweeps/ keys, the local state and the data are the data
// directory's two parts, each counted once; and a listing stops at
// MaxFiles, its counts then a lower bound with no growth worked out.
func TestDiskOnS3(t *testing.T) {
	srv := tests3.Start(t)
	tg := s3Target(t, srv, "disk", "")
	ctx := context.Background()
	put := func(key string, n int) {
		t.Helper()
		if _, err := srv.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(tests3.Bucket), Key: aws.String(key), Body: strings.NewReader(strings.Repeat("x", n))}); err != nil {
			t.Fatal(err)
		}
	}
	for i, k := range []string{"directory.db/ltx/0/a.ltx", "people/p1/person.db/ltx/0/b.ltx", "media/people/p1/media/m1"} {
		put("disk/"+k, 100*(i+1)) // 100 + 200 + 300
	}
	put("disk/sweeps/20261206T030000Z/directory.db", 1000)
	put("disk/sweeps/20261206T030000Z/manifest.json", 50)
	put("other/people/p2/person.db/ltx/0/c.ltx", 7777) // another server's prefix

	dir := t.TempDir()
	meta := filepath.Join(dir, "replication")
	for p, n := range map[string]int{"directory.db": 4096, "people/p1/person.db": 8192, "replication/directory.db/ltx/0/a.ltx": 64, "replication/disk.json": 0} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), make([]byte, n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d := &backup.Disk{Target: tg, DataDir: dir, MetaDir: meta}
	if err := d.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	s := d.Report().Last
	if s.ReplicaFiles != 5 || s.ReplicaBytes != 1650 || s.SweepBytes != 1050 || s.StateFiles != 2 || s.StateBytes != 64 || s.DataFiles != 2 || s.DataBytes != 12288 || s.Partial {
		t.Errorf("sample %+v; want 5 files 1650 B on the replica (1050 B sweeps), 64 B of state in 2 files, 12288 B of data in 2 files", s)
	}

	bounded := &backup.Disk{Target: tg, DataDir: dir, MetaDir: filepath.Join(t.TempDir(), "replication"), MaxFiles: 3}
	if err := bounded.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	if r := bounded.Report(); !r.Last.Partial || r.Last.ReplicaFiles != 3 || r.Last.ReplicaBytes >= 1650 || r.Span() != 0 {
		t.Errorf("a listing past MaxFiles: %+v, span %v", r.Last, r.Span())
	}
}
