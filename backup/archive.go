package backup

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/nah-app/nah"
)

// ArchiveBytes is what one WriteArchive in flight holds in memory: gzip at
// archiveLevel allocates 794 KiB (measured: level 1 takes 1,186 KiB, levels
// 2 to 9 the same 794), tar's header blocks and the copy's 32 KiB buffer,
// rounded up.
const ArchiveBytes = 1 << 20

// archiveLevel: level 2 compresses SQLite pages nearly as well as the
// default at a fraction of the CPU, on two shared cores.
const archiveLevel = 2

// WriteArchive writes to w a .tar.gz laid out as a data directory that
// `nah serve` opens: each database of src as a consistent copy (Backup, one
// at a time, so one extra copy on disk at most), then each media file as it
// is (they never change once written), those of the people whose
// databases were listed. Nothing reaches w before the first
// database's copy is made, so a failure until then can still be answered
// with an error page. A person purged since the list was made is left out.
func WriteArchive(ctx context.Context, w io.Writer, src Source) error {
	rels, err := src.Databases(ctx)
	if err != nil {
		return err
	}
	var (
		zw   *gzip.Writer
		tw   *tar.Writer
		now  = time.Now()
		dirs = map[string]bool{}
		buf  = make([]byte, 32<<10)
	)
	start := func() error {
		if tw == nil {
			if zw, err = gzip.NewWriterLevel(w, archiveLevel); err != nil {
				return err
			}
			tw = tar.NewWriter(zw)
		}
		return nil
	}
	dir := func(names ...string) error {
		for _, name := range names {
			if dirs[name] {
				continue
			}
			dirs[name] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o700, ModTime: now}); err != nil {
				return err
			}
		}
		return nil
	}
	// file writes f as rel under the folders it needs, and closes it.
	file := func(rel string, f fs.File, mtime func(fs.FileInfo) time.Time, folders ...string) error {
		defer f.Close()
		st, err := f.Stat()
		if err == nil {
			err = start()
		}
		if err == nil {
			err = dir(folders...)
		}
		if err == nil {
			err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o600, Size: st.Size(), ModTime: mtime(st)})
		}
		if err == nil {
			// One buffer for every file: io.Copy's own 32 KiB a file was
			// garbage enough that the heap's peak grew with the count
			// (TestBackupWalksMemoryIsConstant: +1.3 MB at 25,000 media
			// of 100 bytes over 5,000). The wrapper hides os.File's WriteTo,
			// which would copy through a fresh buffer again.
			_, err = io.CopyBuffer(tw, struct{ io.Reader }{f}, buf)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		return nil
	}
	copied := func(fs.FileInfo) time.Time { return now }
	for _, rel := range rels {
		f, err := src.Backup(ctx, rel)
		if nah.ErrorCode(err) == nah.NotFound {
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		var folders []string
		if id := nah.PersonOfRel(rel); id != "" {
			folders = []string{nah.PeopleRel, nah.PersonDirRel(id)}
		}
		if err := file(rel, f, copied, folders...); err != nil {
			return err
		}
	}
	// The media of the people listed, a folder's batch of names at a time:
	// the memory is one batch, whatever the count
	// (TestBackupWalksMemoryIsConstant).
	for _, rel := range rels {
		owner := nah.PersonOfRel(rel)
		if owner == "" {
			continue
		}
		folders := []string{nah.PeopleRel, nah.PersonDirRel(owner), nah.MediaDirRel(owner)}
		err := src.MediaOf(ctx, owner, func(names []string) error {
			for _, name := range names {
				rel := nah.MediaRel(owner, name)
				f, err := src.OpenMediaFile(rel)
				if errors.Is(err, fs.ErrNotExist) {
					continue // deleted since the folder was read
				}
				if err != nil {
					return err
				}
				if err := file(rel, f, fs.FileInfo.ModTime, folders...); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if err := start(); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}
