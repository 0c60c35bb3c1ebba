package testutil

import (
	"os"
	"path/filepath"
	"time"

	"github.com/superfly/ltx"
)

// LTXBomb writes an LTX snapshot into the replica folder of one database
// (a directory target's <target>/<rel>) at the snapshot level, newer than
// any real one: its header claims commit pages of 4 KiB, and it holds
// pages zero pages, compressed to ~20 bytes each, and no trailer. A
// restore that trusts it writes pages x 4 KiB before it fails.
func LTXBomb(replicaOfDB string, pages int, commit uint32) (string, error) {
	const maxTXID = 1 << 40
	dir := filepath.Join(replicaOfDB, "ltx", "9")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	p := filepath.Join(dir, ltx.FormatFilename(1, maxTXID))
	f, err := os.Create(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	enc, err := ltx.NewEncoder(f)
	if err != nil {
		return "", err
	}
	if err := enc.EncodeHeader(ltx.Header{Version: ltx.Version, PageSize: 4096, Commit: commit, MinTXID: 1, MaxTXID: maxTXID, Timestamp: time.Now().UnixMilli()}); err != nil {
		return "", err
	}
	page := make([]byte, 4096)
	for pgno := uint32(1); pgno <= uint32(pages); pgno++ {
		if err := enc.EncodePage(ltx.PageHeader{Pgno: pgno}, page); err != nil {
			return "", err
		}
	}
	return p, f.Close()
}
