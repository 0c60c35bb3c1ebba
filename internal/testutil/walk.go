package testutil

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// NoTrace fails the test if a file name under dir, or a file's bytes, hold
// id (a person deleted for good), or if the walk found no file to search.
func NoTrace(t testing.TB, dir, id string) {
	t.Helper()
	files := 0
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.Contains(p, id) {
			t.Errorf("a file name holds the id: %s", p)
		}
		if !e.Type().IsRegular() {
			return nil
		}
		files++
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(id)) {
			t.Errorf("%s holds the id", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("no file was searched")
	}
}

// LTXTimes gives every LTX file under dir the modification time of its
// header's timestamp, as Litestream's file client writes them: a copy
// loses them, and restores to a time go by them.
func LTXTimes(t testing.TB, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !strings.HasSuffix(p, ".ltx") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil || len(b) < 40 {
			return fmt.Errorf("%s: %d bytes, %v", p, len(b), err)
		}
		at := time.UnixMilli(int64(binary.BigEndian.Uint64(b[32:40]))) // ltx.Header's Timestamp
		return os.Chtimes(p, at, at)
	})
	if err != nil {
		t.Fatal(err)
	}
}
