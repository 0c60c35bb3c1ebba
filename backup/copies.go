package backup

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"time"

	"github.com/nah-app/nah"
)

// The nightly copies (the sweeps on the target) as the console lists and
// downloads them. A sweep with its manifest never changes, and one cut
// short is never resumed: each is read once and kept by stamp.

// NightlyCopy is one sweep on the target.
type NightlyCopy struct {
	Stamp    string
	Started  time.Time
	Finished time.Time // zero unless Complete
	Files    int       // databases copied
	Bytes    int64
	Failed   int  // databases the sweep could not copy
	Complete bool // its manifest is written: restores and downloads use it
	Running  bool // the sweep making it runs now
}

// ErrNoCopy is a download of a stamp that is not a complete copy on the
// target.
var ErrNoCopy = errors.New("no such nightly copy")

// Copies lists the sweeps on the target, newest first: one listing of
// sweeps/ and, for a stamp not seen before, its manifest (or, cut short,
// the count of what it copied).
func (s *Sweeper) Copies(ctx context.Context) ([]NightlyCopy, error) {
	blobs := s.Target.store()
	names, err := blobs.children(ctx, sweepPrefix)
	if err != nil {
		return nil, err
	}
	prog, running := s.Progress()
	s.mu.Lock()
	seen := s.copies
	s.mu.Unlock()
	next := map[string]NightlyCopy{}
	var out []NightlyCopy
	databases := -1 // counted for the first stamp not seen before
	for _, stamp := range names {
		started, err := time.Parse(stampFormat, stamp)
		if err != nil {
			continue
		}
		if running && stamp == prog.Stamp {
			out = append(out, NightlyCopy{Stamp: stamp, Started: started, Files: prog.Done, Bytes: prog.Bytes, Running: true})
			continue
		}
		c, ok := seen[stamp]
		if !ok {
			if databases < 0 {
				dbs, err := s.Source.Databases(ctx)
				if err != nil {
					return nil, err
				}
				databases = len(dbs)
			}
			if c, err = readCopy(ctx, blobs, stamp, started, databases); err != nil {
				return nil, err
			}
		}
		next[stamp] = c
		out = append(out, c)
	}
	s.mu.Lock()
	s.copies = next
	s.mu.Unlock()
	slices.Reverse(out)
	return out, nil
}

// readCopy reads one sweep's state from the target, its manifest bounded
// by the number of databases there are.
func readCopy(ctx context.Context, blobs blobStore, stamp string, started time.Time, databases int) (NightlyCopy, error) {
	c := NightlyCopy{Stamp: stamp, Started: started}
	m, err := readManifest(ctx, blobs, stamp, databases)
	if errors.Is(err, fs.ErrNotExist) {
		c.Files, c.Bytes, err = blobs.usage(ctx, path.Join(sweepPrefix, stamp), 0)
		return c, err
	}
	if err != nil {
		return c, fmt.Errorf("nightly copy %s: %w", stamp, err)
	}
	c.Complete, c.Finished, c.Files, c.Bytes, c.Failed = true, m.Finished, len(m.Files), m.Bytes, len(m.Failed)
	return c, nil
}

// WriteCopy writes complete sweep stamp to w as a .tar.gz laid out as a data
// directory that `nah serve` opens: its databases, then the media mirrored
// on the target of the people in it, holding ArchiveBytes as WriteArchive
// does. Nothing reaches w before the manifest is read; a database whose bytes differ from its manifest's sum
// ends it with an error, so that a broken copy is never a whole archive.
// databases, how many there are live, bounds the manifest.
func WriteCopy(ctx context.Context, t *Target, stamp string, databases int, w io.Writer) error {
	blobs := t.store()
	if _, err := time.Parse(stampFormat, stamp); err != nil {
		return ErrNoCopy
	}
	m, err := readManifest(ctx, blobs, stamp, databases)
	if errors.Is(err, fs.ErrNotExist) {
		return ErrNoCopy
	}
	if err != nil {
		return err
	}
	zw, err := gzip.NewWriterLevel(w, archiveLevel)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	dirs := map[string]bool{}
	dir := func(name string) error {
		if dirs[name] {
			return nil
		}
		dirs[name] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o700, ModTime: m.Finished})
	}
	people := map[string]bool{}
	put := func(key, rel string, mod time.Time, want *FileSum) error {
		r, size, err := blobs.open(ctx, key)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		defer r.Close()
		if want != nil && want.Size != size {
			return fmt.Errorf("%s: %d bytes on the target, %d in the manifest", rel, size, want.Size)
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o600, Size: size, ModTime: mod}); err != nil {
			return err
		}
		h := sha256.New()
		if _, err := io.Copy(io.MultiWriter(tw, h), r); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if want != nil && want.SHA256 != "" && hex.EncodeToString(h.Sum(nil)) != want.SHA256 {
			return fmt.Errorf("%s: changed on the target since the sweep wrote it (SHA-256 differs)", rel)
		}
		return nil
	}
	for _, rel := range m.Files {
		if !nah.ValidDatabaseRel(rel) {
			return fmt.Errorf("the manifest of %s names %q, not a database path", stamp, rel)
		}
		if id := nah.PersonOfRel(rel); id != "" {
			if err := errors.Join(dir(nah.PeopleRel), dir(nah.PersonDirRel(id))); err != nil {
				return err
			}
			people[id] = true
		}
		var want *FileSum
		if sum, ok := m.Sums[rel]; ok {
			want = &sum
		}
		if err := put(path.Join(sweepPrefix, stamp, rel), rel, m.Finished, want); err != nil {
			return err
		}
	}
	media, err := MediaFiles(ctx, t)
	if err != nil {
		return err
	}
	for _, rel := range media {
		owner, _ := nah.SplitMediaRel(rel)
		if !people[owner] {
			continue
		}
		if err := dir(nah.MediaDirRel(owner)); err != nil {
			return err
		}
		err := put(path.Join(mediaPrefix, rel), rel, m.Finished, nil)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted since the listing: its owner's next sweep forgets it
		}
		if err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// CopyName is the file name a download of sweep stamp is offered under.
func CopyName(stamp string) string { return "nah-copy-" + stamp + ".tar.gz" }

// HasCopy says whether sweep stamp is a complete copy on the target, its
// manifest readable within the bound of databases databases.
func HasCopy(ctx context.Context, t *Target, stamp string, databases int) bool {
	if _, err := time.Parse(stampFormat, stamp); err != nil {
		return false
	}
	_, err := readManifest(ctx, t.store(), stamp, databases)
	return err == nil
}
