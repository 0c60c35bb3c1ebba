package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path"

	"github.com/nah-app/nah"
)

// The drill's check of mirrored media against the live files (drill.go).

// checkMedia compares mirrored media files of the sampled people with the
// live files, by size and SHA-256: at most drillMediaSample files and
// drillMediaBytes a drill. A file not mirrored yet waits for the next sweep.
func (d *Drill) checkMedia(ctx context.Context, r *DrillReport, sample []string) {
	mirrored, err := MediaFiles(ctx, d.Target)
	if err != nil {
		return
	}
	people := map[string]bool{}
	for _, rel := range sample {
		people[nah.PersonOfRel(rel)] = true
	}
	var bytes int64
	for _, rel := range mirrored {
		if r.Media >= drillMediaSample || bytes >= drillMediaBytes || ctx.Err() != nil {
			return
		}
		owner, _ := nah.SplitMediaRel(rel)
		if owner == "" || !people[owner] {
			continue
		}
		f, err := d.Source.OpenMediaFile(rel)
		if err != nil {
			continue // deleted since: the next sweep removes its mirror
		}
		live, err := sumFile(f)
		f.Close()
		if err != nil {
			continue
		}
		r.Media++
		bytes += live.Size
		what := ""
		rc, err := d.Target.store().get(ctx, path.Join(mediaPrefix, rel))
		if err != nil {
			what = "cannot be read from the mirror: " + err.Error()
		} else {
			h := sha256.New()
			n, err := io.Copy(h, io.LimitReader(rc, drillMediaBytes))
			rc.Close()
			got := FileSum{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}
			switch {
			case err != nil:
				what = "cannot be read from the mirror: " + err.Error()
			case got != live:
				what = fmt.Sprintf("differs on the mirror: %d bytes with SHA-256 %.12s…, live %d bytes with %.12s…", got.Size, got.SHA256, live.Size, live.SHA256)
			}
		}
		if what != "" {
			pr := nah.PersonRel(owner)
			r.Failures = append(r.Failures, DrillFailure{Rel: rel, Who: d.who(ctx, pr), What: "media file " + path.Base(rel) + " " + what})
			continue
		}
		r.MediaOK++
	}
}
