package backup

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/superfly/ltx"
)

// TestLTXWriterIsLTXEncoder: writeLTX writes what ltx.Encoder writes, byte
// for byte, for frames and snapshots of every shape a ship makes (page
// sizes, the lock page, pages alike and random), one kept writer after
// another, and refuses what the encoder refuses.
func TestLTXWriterIsLTXEncoder(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	page := func(size int) []byte {
		b := make([]byte, size)
		switch rnd.IntN(3) {
		case 0: // random: does not compress
			for i := range b {
				b[i] = byte(rnd.IntN(256))
			}
		case 1: // a few runs
			for i := range b {
				b[i] = byte(i / (1 + rnd.IntN(300)))
			}
		} // else zeros
		return b
	}
	for n := range 300 {
		pageSize := []uint32{512, 4096, 4096, 65536}[rnd.IntN(4)]
		lock := ltx.LockPgno(pageSize)
		snapshot := rnd.IntN(3) == 0
		var pgnos []uint32
		var commit uint32
		if snapshot {
			commit = 1 + uint32(rnd.IntN(12))
			for p := uint32(1); p <= commit; p++ {
				pgnos = append(pgnos, p)
			}
		} else {
			commit = 2 + uint32(rnd.IntN(3000))
			for p := uint32(1); p <= commit; p += 1 + uint32(rnd.IntN(400)) {
				pgnos = append(pgnos, p)
			}
			if rnd.IntN(5) == 0 { // either side of the lock page
				commit = lock + 10
				pgnos = append(pgnos, lock-1, lock+1)
			}
		}
		txid := ltx.TXID(1 + rnd.IntN(1000))
		if snapshot {
			txid = 1
		}
		h := ltx.Header{
			Version: ltx.Version, Flags: ltx.HeaderFlagNoChecksum, PageSize: pageSize, Commit: commit,
			MinTXID: txid, MaxTXID: txid, Timestamp: rnd.Int64N(1 << 42),
			WALOffset: 32, WALSize: int64(rnd.IntN(1 << 20)), WALSalt1: rnd.Uint32(), WALSalt2: rnd.Uint32(),
		}
		data := make([][]byte, len(pgnos))
		for i := range data {
			data[i] = page(int(pageSize))
		}

		var want bytes.Buffer
		enc, _ := ltx.NewEncoder(&want)
		if err := enc.EncodeHeader(h); err != nil {
			t.Fatal(err)
		}
		for i, p := range pgnos {
			if err := enc.EncodePage(ltx.PageHeader{Pgno: p}, data[i]); err != nil {
				t.Fatal(err)
			}
		}
		if err := enc.Close(); err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		err := writeLTX(&got, h, func(lw *ltxWriter) error {
			for i, p := range pgnos {
				if err := lw.page(p, data[i]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil || !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("file %d (snapshot %v, %d pages of %d): %d bytes, want %d, equal %v, %v",
				n, snapshot, len(pgnos), pageSize, got.Len(), want.Len(), bytes.Equal(got.Bytes(), want.Bytes()), err)
		}
		if err := ltx.NewDecoder(&got).Verify(); err != nil {
			t.Fatalf("file %d: %v", n, err)
		}
	}

	h := ltx.Header{Version: ltx.Version, Flags: ltx.HeaderFlagNoChecksum, PageSize: 4096, Commit: 10,
		MinTXID: 2, MaxTXID: 2, Timestamp: 1, WALOffset: 32, WALSize: 4120, WALSalt1: 1, WALSalt2: 2}
	lockH := h
	lockH.Commit = ltx.LockPgno(4096) + 1
	snap := h
	snap.MinTXID, snap.MaxTXID = 1, 1
	// A snapshot skips the lock page (1 GiB in): the writer is put just
	// before it, since ltx.Encoder would need a gigabyte of pages to get there.
	lockSnap := snap
	lockSnap.Commit = ltx.LockPgno(4096) + 1
	if err := writeLTX(io.Discard, lockSnap, func(lw *ltxWriter) error {
		lw.last = ltx.LockPgno(4096) - 1
		return lw.page(ltx.LockPgno(4096)+1, make([]byte, 4096))
	}); err != nil {
		t.Errorf("a snapshot across the lock page: %v", err)
	}
	for _, c := range []struct {
		name  string
		h     ltx.Header
		pgnos []uint32
		size  int
	}{
		{"pages out of order", h, []uint32{3, 2}, 4096},
		{"a page twice", h, []uint32{3, 3}, 4096},
		{"a page past the commit", h, []uint32{11}, 4096},
		{"page 0", h, []uint32{0}, 4096},
		{"the lock page", lockH, []uint32{ltx.LockPgno(4096)}, 4096},
		{"a page of the wrong size", h, []uint32{1}, 512},
		{"no pages", h, nil, 4096},
		{"a snapshot not from page 1", snap, []uint32{2}, 4096},
		{"a snapshot with a gap", snap, []uint32{1, 3}, 4096},
		{"a header the encoder refuses", ltx.Header{Version: ltx.Version, PageSize: 4096}, []uint32{1}, 4096},
	} {
		var out bytes.Buffer
		err := writeLTX(&out, c.h, func(lw *ltxWriter) error {
			for _, p := range c.pgnos {
				if err := lw.page(p, make([]byte, c.size)); err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil {
			t.Errorf("%s: written", c.name)
		}
	}
}
