package backup

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/superfly/ltx"
)

// MarkV1 rewrites the mark of the database file at path, whose local
// state is in meta, in the first format (LTX's CRC64 of each page), as an
// earlier nah left it: the file is closed, its WAL empty.
func MarkV1(meta, path string) error {
	m := readMark(meta)
	if m == nil {
		return errors.New(filepath.Base(meta) + ": no mark")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	size := int(m.last.PageSize)
	if len(b) != size*int(m.last.Commit) {
		return errors.New("the file is not the mark's size")
	}
	lock := ltx.LockPgno(m.last.PageSize)
	for i := range m.sums {
		if pgno := uint32(i + 1); pgno != lock {
			m.sums[i] = ltx.ChecksumPage(pgno, b[i*size:(i+1)*size])
		}
	}
	m.v1 = true
	return m.write(meta)
}

// AfterFetchPlan sets what a restore runs between fetching its plan's
// files and Litestream's restore from them (nil: nothing).
func AfterFetchPlan(f func(rel string)) { afterFetchPlan = f }

// BeforeTruncate sets what a checkpoint runs just before it empties a
// WAL (nil: nothing).
func BeforeTruncate(f func(path string)) { beforeTruncate = f }
