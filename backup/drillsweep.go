package backup

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"time"
)

// The drill's check of the newest sweep's copies against its manifest
// (drill.go).

// checkSweep checks the newest complete sweep's copies of the sample
// against the sizes and SHA-256 its manifest recorded, and that each opens
// sound: nah restore falls back to them. databases is how many there are
// live, which bounds the manifest.
func (d *Drill) checkSweep(ctx context.Context, r *DrillReport, sample []string, databases int, scratch string) {
	blobs := d.Target.store()
	sweeps, err := listSweeps(ctx, blobs)
	if err != nil {
		return // the files' restores already said why the target fails
	}
	var stamp string
	for i := len(sweeps) - 1; i >= 0; i-- {
		if sweeps[i].complete {
			stamp = sweeps[i].stamp
			break
		}
	}
	if stamp == "" {
		return
	}
	m, err := readManifest(ctx, blobs, stamp, databases)
	if err != nil {
		r.Failures = append(r.Failures, DrillFailure{Rel: path.Join(sweepPrefix, stamp), Who: "sweep " + stamp, What: "its manifest cannot be read: " + err.Error()})
		return
	}
	if len(m.Sums) == 0 {
		return // made before sweeps recorded sums
	}
	r.Sweep = stamp
	for _, rel := range sample {
		want, ok := m.Sums[rel]
		if !ok || ctx.Err() != nil {
			continue
		}
		t0 := time.Now()
		out := filepath.Join(scratch, "sweep.db")
		removeScratch(out)
		what := ""
		if err := copyTo(ctx, blobs, path.Join(sweepPrefix, stamp, rel), out, min(want.Size, drillBudget(d.liveBytes(ctx, rel)))); err != nil {
			what = "cannot be read: " + err.Error()
		} else if got, err := sumPath(out); err != nil {
			what = "cannot be read: " + err.Error()
		} else if got != want {
			what = fmt.Sprintf("is not the copy the sweep made: %d bytes with SHA-256 %.12s…, its manifest says %d bytes with %.12s…", got.Size, got.SHA256, want.Size, want.SHA256)
		} else if err := d.Source.IntegrityCheck(ctx, out); err != nil {
			what = "fails SQLite's integrity check (" + shortErr(err) + ")"
		}
		if what != "" {
			what = "its copy in sweep " + stamp + " " + what
			r.Failures = append(r.Failures, DrillFailure{Rel: rel, Who: d.who(ctx, rel), What: what, Evidence: d.keep(rel, out, what)})
		} else {
			r.SweepOK++
		}
		removeScratch(out)
		d.pace(ctx, time.Since(t0))
	}
}

// manifestBase and manifestPerFile bound a sweep's manifest.json before
// it is read, by the number of databases: a database takes ~200 bytes of
// it (its path in files, its size and SHA-256 in sums), a failed one its
// path and error. Decoded, the worst JSON for its size (empty strings, 3
// bytes for a 16-byte string header, and the slice's growth) holds ~11
// times its bytes: 11 KiB a database (a 60 MB manifest of empty strings
// took a drill from 28 to 1,236 MB).
const (
	manifestBase    = 64 << 10
	manifestPerFile = 1 << 10
)

// readManifest reads sweep stamp's manifest, refused unread when larger
// than a manifest of databases databases can be.
func readManifest(ctx context.Context, blobs blobStore, stamp string, databases int) (SweepManifest, error) {
	var m SweepManifest
	key := path.Join(sweepPrefix, stamp, "manifest.json")
	rc, size, err := blobs.open(ctx, key)
	if err != nil {
		return m, err
	}
	defer rc.Close()
	limit := manifestBase + int64(databases)*manifestPerFile
	tooLarge := func(size int64) error {
		return fmt.Errorf("%s is %d bytes, more than a manifest of %d databases takes (%d)", key, size, databases, limit)
	}
	if size > limit {
		return m, tooLarge(size)
	}
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return m, err
	}
	if int64(len(b)) > limit {
		return m, tooLarge(int64(len(b)))
	}
	err = json.Unmarshal(b, &m)
	return m, err
}

func sumPath(p string) (FileSum, error) {
	f, err := os.Open(p)
	if err != nil {
		return FileSum{}, err
	}
	defer f.Close()
	return sumFile(f)
}
