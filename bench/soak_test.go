package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/superfly/ltx"
)

// TestSoakGrowth: a replica that grows for the first third and then holds
// reads as a plateau (last third 0), and bytes shipped per byte written
// come from the shipped LTX files, not from the replica's size.
func TestSoakGrowth(t *testing.T) {
	var r SoakResult
	for i := range 7 { // a sample every 10 minutes, an hour
		s := SoakSample{S: float64(i * 600), Written: int64(i) * 1000}
		s.Replica.Bytes = int64(min(i, 2)) * 6000 // grows for 20 minutes, then retention holds it
		s.Shipped.Bytes = int64(i) * 3000         // shipping never stops
		r.Samples = append(r.Samples, s)
	}
	r.summarise()
	if r.Seconds != 3600 || r.PerHour.Replica != 12000 || r.PerHour.Shipped != 18000 || r.PerHour.Written != 6000 {
		t.Fatalf("per hour %+v over %v s", r.PerHour, r.Seconds)
	}
	if r.FirstThird.Replica != 36000 || r.LastThird.Replica != 0 {
		t.Fatalf("replica: first third %v an hour, last third %v", r.FirstThird.Replica, r.LastThird.Replica)
	}
	if r.ShippedPerWritten != 3 {
		t.Fatalf("shipped per written %v, want 3", r.ShippedPerWritten)
	}
}

// TestScanLTX: the replica's LTX files by their database and level, a
// file being written left out, and a file's pages counted by the decoder.
func TestScanLTX(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "people", "p1", "person.db", "ltx", "0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fh, err := os.Create(filepath.Join(dir, "0000000000000001-0000000000000001.ltx"))
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := ltx.NewEncoder(fh)
	if err := enc.EncodeHeader(ltx.Header{Version: ltx.Version, Flags: ltx.HeaderFlagNoChecksum, PageSize: 4096, Commit: 3, MinTXID: 1, MaxTXID: 1, Timestamp: 1}); err != nil {
		t.Fatal(err)
	}
	for pgno := range uint32(3) {
		if err := enc.EncodePage(ltx.PageHeader{Pgno: pgno + 1}, make([]byte, 4096)); err != nil {
			t.Fatal(err)
		}
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	os.WriteFile(filepath.Join(dir, "0000000000000002-0000000000000002.ltx.tmp"), []byte("half"), 0o644)

	files := scanLTX(root)
	rel := filepath.Join("people", "p1", "person.db", "ltx", "0", "0000000000000001-0000000000000001.ltx")
	f, ok := files[rel]
	if len(files) != 1 || !ok || f.DB != "people/p1/person.db" || f.Level != "0" || f.Bytes != enc.N() {
		t.Fatalf("scan: %+v, want only %s (%d bytes)", files, rel, enc.N())
	}
	pages, h := ltxPages(filepath.Join(root, rel))
	if pages != 3 || !h.IsSnapshot() || h.Commit != 3 {
		t.Fatalf("%d pages, snapshot %v, commit %d; want 3, true, 3", pages, h.IsSnapshot(), h.Commit)
	}
}

// TestDataUse: databases, WALs and the replication state are told apart.
func TestDataUse(t *testing.T) {
	data := t.TempDir()
	for name, size := range map[string]int{
		"directory.db": 10, "directory.db-wal": 20, "people/a/person.db": 100, "people/a/person.db-wal": 200,
		"people/a/person.db-shm": 32, "replication/people/a/person.db/ltx/0/1.ltx": 1000, "replication/x.db": 5,
	} {
		p := filepath.Join(data, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	live, wal, state := dataUse(data)
	if live != (DirUse{110, 2}) || wal != (DirUse{220, 2}) || state != (DirUse{1005, 2}) {
		t.Fatalf("live %+v, wal %+v, state %+v", live, wal, state)
	}
}

// TestShipLog: files there at the start are not shipped, a file counts
// once however often it is listed, and a jump in a database's level-0
// TXIDs is a file missed between listings.
func TestShipLog(t *testing.T) {
	l0 := func(db, name string, n int64) (string, ltxFile) {
		return db + "/ltx/0/" + name, ltxFile{DB: db, Level: "0", Bytes: n}
	}
	files := map[string]ltxFile{}
	put := func(rel string, f ltxFile) { files[rel] = f }
	put(l0("a", "0000000000000001-0000000000000005.ltx", 1000))
	l := newShipLog(files)
	put(l0("a", "0000000000000006-0000000000000006.ltx", 10))
	put(l0("b", "0000000000000001-0000000000000001.ltx", 20))
	l.add(files)
	l.add(files)
	delete(files, "a/ltx/0/0000000000000006-0000000000000006.ltx")
	put(l0("a", "0000000000000008-0000000000000008.ltx", 30)) // 7 came and went
	put("a/ltx/1/0000000000000001-0000000000000008.ltx", ltxFile{DB: "a", Level: "1", Bytes: 40})
	l.add(files)
	if l.shipped != (DirUse{100, 4}) || l.missed != 1 {
		t.Fatalf("shipped %+v, missed %d; want 100 bytes in 4 files, 1 missed", l.shipped, l.missed)
	}
}
