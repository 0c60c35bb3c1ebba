package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/superfly/ltx"

	"github.com/nah-app/nah/internal/testutil"
	"github.com/nah-app/nah/store"
)

// TestReplicaIntegrityAtScale: hundreds of people on a small cache (48
// open files, 6 of them watched), 16 clients posting and deleting, a few
// people writing most moments and large ones, so that files leave and
// rejoin the watched set over and over with SQLite's auto-checkpoints and
// our own closes between; a kill -9 half-way and a restart; then every
// file of the replica, restored by `nah restore` and by Litestream's own
// command line, passes SQLite's integrity check and holds every row of the
// live file. On the code before backup/wal.go, a few heavy posters'
// replicas restored corrupt in every run.
//
// NAH_SOAK=10m runs it for ten minutes with 1,000 people.
//
// Parallel with TestDigestKill9MidMinute, which mostly waits on the clock.
func TestReplicaIntegrityAtScale(t *testing.T) {
	t.Parallel()
	cli := litestreamCLI(t)
	people, half := 240, 8*time.Second
	if v := os.Getenv("NAH_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("NAH_SOAK=%q: %v", v, err)
		}
		people, half = 1000, d/2
	}
	data, repl := t.TempDir(), filepath.Join(t.TempDir(), "replica")
	env := replicaEnv(repl, "NAH_MAX_OPEN_FILES=48", "NAH_REPLICA_MAX_FILES=6", "NAH_SWEEP_EVERY=off")
	p := start(t, data, env...)

	type person struct {
		token string
		mu    sync.Mutex
		own   []string
	}
	all := make([]*person, people)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < people; i = int(next.Add(1)) - 1 {
				_, token := p.signup(t, fmt.Sprintf("soak%04d", i))
				all[i] = &person{token: token}
			}
		})
	}
	wg.Wait()
	heavy := all[:max(people/30, 4)] // six posts in ten are theirs, and larger

	var posts, deletes atomic.Int64
	run := func(p *proc, seed uint64, d time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(seed, uint64(w)))
				for ctx.Err() == nil {
					pp, size := all[r.IntN(len(all))], 300+r.IntN(200)
					if r.IntN(10) < 6 {
						pp, size = heavy[r.IntN(len(heavy))], 2<<10+r.IntN(38<<10)
					}
					pp.mu.Lock()
					if len(pp.own) > 0 && r.IntN(10) == 0 {
						k := r.IntN(len(pp.own))
						st, _, err := p.call("DELETE", "/api/v1/moments/"+pp.own[k], pp.token, nil)
						if err == nil && st == 204 {
							pp.own = append(pp.own[:k], pp.own[k+1:]...)
							deletes.Add(1)
						}
					} else {
						body := make([]byte, size)
						for i := range body {
							body[i] = byte(r.Uint32())
						}
						st, res, err := p.call("POST", "/api/v1/moments", pp.token, map[string]string{"body": base64.StdEncoding.EncodeToString(body)})
						if err == nil && st == 201 {
							pp.own = append(pp.own, res["id"].(string))
							posts.Add(1)
						}
					}
					pp.mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	run(p, 1, half)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	p = start(t, data, env...)
	run(p, 2, half)
	p.stop(t)
	if posts.Load() < int64(people) {
		t.Fatalf("only %d posts: the test proved little", posts.Load())
	}

	rels := databases(t, data)
	out := filepath.Join(t.TempDir(), "restored")
	if o, e, code := nahRun(t, "restore", "-from", repl, "-to", out); code != 0 {
		t.Errorf("nah restore: exit %d\n%s%s", code, o, e)
	} else {
		for _, rel := range rels {
			if err := store.IntegrityCheck(context.Background(), filepath.Join(out, rel)); err != nil {
				t.Errorf("nah restore: %v", err)
			}
		}
		sameData(t, data, out)
	}

	cliOut, bad := t.TempDir(), 0
	for i, rel := range rels {
		o := filepath.Join(cliOut, fmt.Sprintf("%04d.db", i))
		cmd := exec.Command(cli, "restore", "-o", o, "file://"+filepath.Join(repl, rel))
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("litestream restore %s: %v\n%s", rel, err, b)
			continue
		}
		if err := store.IntegrityCheck(context.Background(), o); err != nil {
			t.Errorf("litestream restore %s: %.300v", rel, err)
			bad++
			continue
		}
		live, got := testutil.Dump(t, filepath.Join(data, rel)), testutil.Dump(t, o)
		for tb, rows := range live {
			if strings.Join(rows, "\n") != strings.Join(got[tb], "\n") {
				t.Errorf("litestream restore %s: table %s: %d rows, live %d\n%.300s", rel, tb, len(got[tb]), len(rows), firstDiff(rows, got[tb]))
				bad++
				break
			}
		}
	}
	files, gens := ltxHistory(t, repl, rels)
	t.Logf("%d people, %d posts, %d deletes; the replica holds %d LTX files over %d WAL generations; %d of %d files restored by Litestream's command corrupt or unequal", people, posts.Load(), deletes.Load(), files, gens, bad, len(rels))
}

// ltxHistory counts the level-0 LTX files of every database on the
// replica directory repl, and the WAL generations (runs of the same salts)
// they were read from: each new generation is a WAL started again, by a
// checkpoint or a close.
func ltxHistory(t *testing.T, repl string, rels []string) (files, gens int) {
	t.Helper()
	for _, rel := range rels {
		names, _ := filepath.Glob(filepath.Join(repl, rel, "ltx", "0", "*.ltx"))
		sort.Strings(names)
		var last [2]uint32
		for _, n := range names {
			f, err := os.Open(n)
			if err != nil {
				t.Fatal(err)
			}
			dec := ltx.NewDecoder(f)
			err = dec.DecodeHeader()
			f.Close()
			if err != nil {
				t.Fatalf("%s: %v", n, err)
			}
			h := dec.Header()
			files++
			if s := [2]uint32{h.WALSalt1, h.WALSalt2}; s != last {
				gens++
				last = s
			}
		}
	}
	return files, gens
}

// TestKillLeavesNoWriteBehind: posts to files replication watches, and a
// kill -9 within the second before Litestream ships them; after a restart
// nobody posts again, the server stops, and the replica still holds every
// acknowledged moment: the next start takes up every file that was
// watched at the kill, not only those waiting in the queue.
func TestKillLeavesNoWriteBehind(t *testing.T) {
	data, repl, out := t.TempDir(), filepath.Join(t.TempDir(), "replica"), filepath.Join(t.TempDir(), "restored")
	env := replicaEnv(repl)
	p := start(t, data, env...)
	ids, tokens := make([]string, 4), make([]string, 4)
	for i := range ids {
		ids[i], tokens[i] = p.signup(t, fmt.Sprintf("killed%d", i))
		p.post(t, tokens[i], "first")
	}
	time.Sleep(3 * time.Second) // every file taken up and watched, its first moment shipped
	last := make([]string, len(ids))
	for i, token := range tokens {
		last[i] = p.post(t, token, "just before the kill")
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	p = start(t, data, env...)
	time.Sleep(time.Second)
	p.stop(t)
	restoreInto(t, repl, out)
	p = start(t, out, "NAH_REPLICA_URL=off")
	for i, id := range ids {
		if !p.ownMoments(t, id, tokens[i])[last[i]] {
			t.Errorf("%s: the moment acknowledged just before the kill is not on the replica", id)
		}
	}
	p.stop(t)
}
