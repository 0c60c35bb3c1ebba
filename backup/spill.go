package backup

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// Where a ship builds its LTX file: pooled buffers, spilled to a file past
// shipMemMax, kept in Litestream's local state by a rename.

// shipBufs holds the buffers ships build their frames in; one grown past
// shipBufKeep (a ship of more than ~60 pages) is let go of after use.
var shipBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const shipBufKeep = 256 << 10

func putShipBuf(b *bytes.Buffer) {
	if b.Cap() <= shipBufKeep {
		shipBufs.Put(b)
	}
}

// shipMemMax is how much of an LTX file a ship builds in memory: a ship
// of frames is a few pages (~40 KiB a post), a snapshot the whole file.
const shipMemMax = 1 << 20

// spillFile is an LTX file being built: in buf up to shipMemMax, then in
// the temporary file name, created then.
type spillFile struct {
	name string
	buf  *bytes.Buffer
	f    *os.File
}

func (s *spillFile) Write(b []byte) (int, error) {
	if s.f == nil && s.buf.Len()+len(b) <= shipMemMax {
		return s.buf.Write(b)
	}
	if s.f == nil {
		f, err := os.OpenFile(s.name, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
		if err != nil {
			return 0, err
		}
		s.f = f
		if _, err := s.buf.WriteTo(f); err != nil {
			return 0, err
		}
	}
	return s.f.Write(b)
}

// reader reads what was written from its start.
func (s *spillFile) reader() (io.Reader, error) {
	if s.f == nil {
		return bytes.NewReader(s.buf.Bytes()), nil
	}
	_, err := s.f.Seek(0, io.SeekStart)
	return s.f, err
}

// keep makes what was written the file name, unsynced, in place of prev,
// the local newest it follows ("" for none: Litestream reads only the
// newest, compaction the target). prev is renamed and rewritten rather
// than a file made and prev removed: ext4's inode allocation was a
// visible share of the machine under the bench's burst (bench/THRESHOLDS.md,
// "Moments by id"). A crash in between leaves prev's bytes or a torn file under name,
// which verifyLTX refuses; on an error the next ship repairs from there.
func (s *spillFile) keep(name, prev string) error {
	if s.f != nil {
		if err := os.Rename(s.name, name); err != nil {
			return err
		}
		if prev != "" {
			os.Remove(prev)
		}
		return nil
	}
	if prev != "" {
		if err := os.Rename(prev, name); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	// Overwritten and then cut to length, not opened with O_TRUNC: ext4
	// starts writing back a file emptied and rewritten when it is closed
	// (auto_da_alloc), 68 against 18 µs of CPU a 40 KiB rewrite here.
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(s.buf.Bytes(), 0)
	if err == nil {
		err = f.Truncate(int64(s.buf.Len()))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// close lets go of the buffer and removes the temporary file if any
// (renamed by keep, it is gone already).
func (s *spillFile) close() {
	if s.f != nil {
		s.f.Close()
		os.Remove(s.name)
	}
	putShipBuf(s.buf)
}

// syncRename syncs f and renames it to name, its folder synced too.
func syncRename(f *os.File, name string) error {
	err := f.Sync()
	if err == nil {
		err = os.Rename(f.Name(), name)
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	d, err := os.Open(filepath.Dir(name))
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
