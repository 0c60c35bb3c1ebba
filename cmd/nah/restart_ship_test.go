package main

import (
	bin "encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/superfly/ltx"
)

// level0 lists the level-0 LTX files of person id on replica directory
// repl, by TXID.
func level0(t *testing.T, repl, id string) map[ltx.TXID]string {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(repl, "people", id, "person.db", "ltx", "0", "*.ltx"))
	out := map[ltx.TXID]string{}
	for _, n := range names {
		_, hi, err := ltx.ParseFilename(filepath.Base(n))
		if err == nil {
			out[hi] = n
		}
	}
	return out
}

// ltxPages decodes LTX file name whole and returns its header and how many
// pages it holds.
func ltxPages(t *testing.T, name string) (ltx.Header, int) {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := ltx.NewDecoder(f)
	if err := dec.DecodeHeader(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	data := make([]byte, dec.Header().PageSize)
	n := 0
	for {
		var ph ltx.PageHeader
		if err := dec.DecodePage(&ph, data); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n++
	}
	return dec.Header(), n
}

// walEnd is the size of the WAL at w and the database's pages at its
// last frame (a commit, once replicated; 4 KiB pages).
func walEnd(t *testing.T, w string) (size, pages int64) {
	t.Helper()
	f, err := os.Open(w)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() <= 32 {
		return st.Size(), 0
	}
	var hdr [24]byte
	if _, err := f.ReadAt(hdr[:], st.Size()-(24+4096)); err != nil {
		t.Fatal(err)
	}
	return st.Size(), int64(bin.BigEndian.Uint32(hdr[4:]))
}

// settled waits until no person's level 0 on repl has grown for a second.
func settled(t *testing.T, repl string, ids []string) map[string]ltx.TXID {
	t.Helper()
	newest := func() map[string]ltx.TXID {
		out := map[string]ltx.TXID{}
		for _, id := range ids {
			for txid := range level0(t, repl, id) {
				out[id] = max(out[id], txid)
			}
		}
		return out
	}
	last, since := newest(), time.Now()
	for deadline := time.Now().Add(30 * time.Second); time.Since(since) < time.Second; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the replica was still growing after 30 s")
		}
		if now := newest(); fmt.Sprint(now) != fmt.Sprint(last) {
			last, since = now, time.Now()
		}
	}
	return last
}

// TestFirstPostAfterARestartShipsThePost: 20 people post a few moments
// each (files of ~90 KB, shipped, not watched; one posts 720 KiB, of
// which its WAL keeps at most the file's size), the server stops (cleanly, its WALs emptied, or
// by a kill -9, its WALs left), starts again, and each person posts once:
// each post reaches the replica as one LTX file holding the post's few
// pages, not the whole file, and the replica restores equal to the live
// data. Before the mark of backup/wal.go, the first post after a clean
// stop shipped every page of the file: 1.28 MB for the 20 posts (26.5 KB
// each, 773 KB for the heavy poster), 71 KB after.
func TestFirstPostAfterARestartShipsThePost(t *testing.T) {
	for _, how := range []string{"clean stop", "kill -9"} {
		t.Run(how, func(t *testing.T) {
			// NAH_RESTART_PEOPLE=150 seeds more files; the first 20 post.
			people := 20
			if v, err := strconv.Atoi(os.Getenv("NAH_RESTART_PEOPLE")); err == nil && v > people {
				people = v
			}
			data, repl := t.TempDir(), filepath.Join(t.TempDir(), "replica")
			env := replicaEnv(repl, "NAH_REPLICA_MAX_FILES=2")
			p := start(t, data, env...)
			ids, tokens := make([]string, people), make([]string, people)
			var wg sync.WaitGroup
			for w := range 4 {
				wg.Go(func() {
					for i := w; i < people; i += 4 {
						ids[i], tokens[i] = p.signup(t, fmt.Sprintf("restart%02d", i))
						r := rand.New(rand.NewPCG(uint64(i), 1))
						for range 12 {
							// Text as little compressible as a family's.
							b := make([]byte, 2000)
							for j := range b {
								b[j] = byte('a' + r.IntN(26))
							}
							p.post(t, tokens[i], string(b))
						}
					}
				})
			}
			wg.Wait()
			// One heavy poster: 720 KiB of moments, of which the WAL keeps
			// at most the database's size (backup.walBound).
			r := rand.New(rand.NewPCG(0, 2))
			for range 24 {
				b := make([]byte, 30<<10)
				for j := range b {
					b[j] = byte('a' + r.IntN(26))
				}
				p.post(t, tokens[0], string(b))
			}
			// Two more people are taken up: if the heavy poster's file was
			// watched, it is let go of, and Litestream leaves its WAL as
			// large as its posts made it (bigWAL empties it then).
			p.signup(t, "restartlate0")
			p.signup(t, "restartlate1")
			settled(t, repl, ids)
			wals, _ := filepath.Glob(filepath.Join(data, "people", "*", "person.db-wal"))
			for _, w := range wals {
				if size, pages := walEnd(t, w); size > max(pages*4096, 256<<10)+40<<10 {
					t.Errorf("%s: %d bytes of WAL once replicated, over a database of %d pages and a post", w, size, pages)
				}
			}
			if how == "kill -9" {
				if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				<-p.done
			} else {
				p.stop(t)
			}
			p = start(t, data, env...)
			// Files watched at a kill are taken up at the start, which may
			// ship what their last second held.
			ids, tokens = ids[:20], tokens[:20]
			before := settled(t, repl, ids)
			for i := range ids {
				p.post(t, tokens[i], "the first post after the restart")
			}
			after := settled(t, repl, ids)
			var total int64
			var sizes []string
			for _, id := range ids {
				files := level0(t, repl, id)
				if after[id] != before[id]+1 {
					t.Errorf("%s: TXID %d to %d for one post, want one LTX file", id, before[id], after[id])
				}
				for txid := before[id] + 1; txid <= after[id]; txid++ {
					name := files[txid]
					if name == "" {
						continue
					}
					h, pages := ltxPages(t, name)
					st, _ := os.Stat(name)
					total += st.Size()
					sizes = append(sizes, fmt.Sprintf("%d", st.Size()))
					if h.IsSnapshot() || pages >= int(h.Commit) || pages > 8 {
						t.Errorf("%s: the first post after a %s shipped %d pages of %d (%d bytes), want the post's few", id, how, pages, h.Commit, st.Size())
					}
				}
			}
			t.Logf("after a %s, the first post of each of %d people (of %d) shipped %d bytes: %s", how, len(ids), people, total, strings.Join(sizes, " "))
			p.stop(t)
			out := filepath.Join(t.TempDir(), "restored")
			restoreInto(t, repl, out)
			sameData(t, data, out)
		})
	}
}
