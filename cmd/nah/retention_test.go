package main

import (
	"context"
	"database/sql"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/superfly/ltx"

	"github.com/nah-app/nah/internal/tests3"
	"github.com/nah-app/nah/store"
)

// TestRetentionAtScale: the retention policy on a short window (20 s), so
// that a test sees many rounds of deletion. Hundreds of people on a small
// cache (files leave and rejoin the watched set; most are only ever
// shipped), a few writing most moments, deletes among the posts, a kill -9
// and a clean restart. After each clean stop: nothing older than the
// window is kept beyond the policy (one snapshot a file from before it,
// nothing below that snapshot), and a history without that snapshot keeps
// its first file; `nah restore` of the newest position equals the live
// data; `nah restore -time` and Litestream's own command
// at random times inside the window give, for every person, a sound file
// holding exactly what they had at some moment before that time (a prefix
// of their acknowledged writes, none started after it).
func TestRetentionAtScale(t *testing.T) {
	repl := filepath.Join(t.TempDir(), "replica")
	retentionAtScale(t, 120, retainTarget{url: repl, writers: 12, cliURL: func(rel string) string { return "file://" + filepath.Join(repl, rel) }, list: dirLTX(repl)})
}

// TestRetentionAtScaleS3 is the same on the real S3 server, with fewer
// people and writers.
func TestRetentionAtScaleS3(t *testing.T) {
	srv := tests3.Start(t)
	var env []string
	for k, v := range srv.Env(srv.Endpoint()) {
		env = append(env, k+"="+v)
	}
	url := "s3://" + tests3.Bucket + "/ret"
	retentionAtScale(t, 30, retainTarget{
		url: url, env: env, writers: 4,
		cliURL: func(rel string) string {
			return url + "/" + rel + "?endpoint=" + srv.Endpoint() + "&region=us-east-1&force-path-style=true"
		},
		list: s3LTX(srv.Client(), "ret"),
	})
}

type retainTarget struct {
	url    string
	env    []string // the S3 server's keys, for the server and both restores
	cliURL func(rel string) string
	list   func(t *testing.T, rel string) []ltxOnTarget
	// writers post at once: fewer on S3, where a visit of a heavy
	// poster's file (a snapshot of megabytes uploaded) takes a second or
	// two on the test's server.
	writers int
}

// ltxOnTarget is one LTX file of a database on the target.
type ltxOnTarget struct {
	level    int
	min, max ltx.TXID
	created  time.Time // the header's time (a directory) or the upload's (S3)
}

func dirLTX(repl string) func(*testing.T, string) []ltxOnTarget {
	return func(t *testing.T, rel string) []ltxOnTarget {
		var out []ltxOnTarget
		for lvl := 0; lvl <= 9; lvl++ {
			es, _ := os.ReadDir(filepath.Join(repl, rel, "ltx", fmt.Sprint(lvl)))
			for _, e := range es {
				lo, hi, err := ltx.ParseFilename(e.Name())
				if err != nil {
					continue
				}
				fi, err := e.Info()
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, ltxOnTarget{lvl, lo, hi, fi.ModTime()})
			}
		}
		return out
	}
}

func s3LTX(c *s3.Client, prefix string) func(*testing.T, string) []ltxOnTarget {
	return func(t *testing.T, rel string) []ltxOnTarget {
		var out []ltxOnTarget
		p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String(tests3.Bucket), Prefix: aws.String(path.Join(prefix, rel) + "/")})
		for p.HasMorePages() {
			page, err := p.NextPage(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range page.Contents {
				k := aws.ToString(o.Key)
				var lvl int // Litestream's S3 layout: <db>/<level in hex>/<file>
				if _, err := fmt.Sscanf(path.Base(path.Dir(k)), "%04x", &lvl); err != nil {
					continue
				}
				lo, hi, err := ltx.ParseFilename(path.Base(k))
				if err != nil {
					continue
				}
				out = append(out, ltxOnTarget{lvl, lo, hi, aws.ToTime(o.LastModified)})
			}
		}
		return out
	}
}

// retainOp is one acknowledged write of a person: a moment posted or
// deleted, with when its request started and was answered.
type retainOp struct {
	add        bool
	id         string
	start, end time.Time
}

func retentionAtScale(t *testing.T, people int, tg retainTarget) {
	cli := litestreamCLI(t)
	const window = 20 * time.Second
	data := t.TempDir()
	env := append([]string{"NAH_REPLICA_URL=" + tg.url, "NAH_SWEEP_EVERY=off", "NAH_RETENTION=" + window.String(),
		"NAH_MAX_OPEN_FILES=48", "NAH_REPLICA_MAX_FILES=6", "NAH_METRICS_ADDR=127.0.0.1:0"}, tg.env...)
	p := start(t, data, env...)

	type person struct {
		id, token string
		mu        sync.Mutex
		own       []string
		ops       []retainOp
	}
	all := make([]*person, people)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < people; i = int(next.Add(1)) - 1 {
				id, token := p.signup(t, fmt.Sprintf("ret%04d", i))
				all[i] = &person{id: id, token: token}
			}
		})
	}
	wg.Wait()
	heavy := all[:max(people/30, 3)]
	var posts atomic.Int64
	run := func(p *proc, seed uint64, d time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		var wg sync.WaitGroup
		for w := range tg.writers {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(seed, uint64(w)))
				for ctx.Err() == nil {
					pp, size := all[r.IntN(len(all))], 300+r.IntN(200)
					if r.IntN(10) < 5 {
						pp, size = heavy[r.IntN(len(heavy))], 2<<10+r.IntN(6<<10)
					}
					pp.mu.Lock()
					start := time.Now()
					if len(pp.own) > 0 && r.IntN(8) == 0 {
						k := r.IntN(len(pp.own))
						st, _, err := p.call("DELETE", "/api/v1/moments/"+pp.own[k], pp.token, nil)
						if err == nil && st == 204 {
							pp.ops = append(pp.ops, retainOp{false, pp.own[k], start, time.Now()})
							pp.own = append(pp.own[:k], pp.own[k+1:]...)
						}
					} else {
						body := make([]byte, size)
						for i := range body {
							body[i] = byte(r.Uint32())
						}
						st, res, err := p.call("POST", "/api/v1/moments", pp.token, map[string]string{"body": base64.StdEncoding.EncodeToString(body)})
						if err == nil && st == 201 {
							id := res["id"].(string)
							pp.own = append(pp.own, id)
							pp.ops = append(pp.ops, retainOp{true, id, start, time.Now()})
							posts.Add(1)
						}
					}
					pp.mu.Unlock()
				}
			})
		}
		wg.Wait()
	}

	// check is every promise of the policy, on the replica as a clean stop
	// at stopped left it, the server having caught up at seen.
	pruned := 0
	check := func(seen, stopped time.Time, round int) {
		t.Helper()
		pruned = 0
		rng := rand.New(rand.NewPCG(uint64(round), 7))
		// Nothing older than the window beyond the policy, as of when the
		// server had looked at every file due: a file is due a second after
		// its next snapshot leaves the window, and looked at no sooner than
		// a visit interval (0.7 s here) after the last look.
		cut := seen.Add(-window - 2*time.Second)
		held := 0
		defer func() {
			t.Logf("round %d: the replica holds %d LTX files of people", round, held)
			if t.Failed() {
				for _, l := range strings.Split(p.log(), "\n") {
					if strings.Contains(l, "retention") || strings.Contains(l, "level=ERROR") {
						t.Logf("the server said: %.300s", l)
					}
				}
			}
		}()
		for _, pp := range all {
			rel := "people/" + pp.id + "/person.db"
			files := tg.list(t, rel)
			held += len(files)
			var base *ltxOnTarget
			old := 0
			for i, f := range files {
				if f.level == 9 && f.created.Before(cut) {
					old++
					if base == nil || f.max > base.max {
						base = &files[i]
					}
				}
			}
			if old > 1 {
				t.Errorf("round %d: %s keeps %d snapshots older than the window and its slack", round, pp.id, old)
			}
			var newest0 ltx.TXID
			for _, f := range files {
				if f.level == 0 {
					newest0 = max(newest0, f.max)
				}
			}
			var low ltx.TXID = 1 << 62
			for _, f := range files {
				if f.level != 9 {
					low = min(low, f.min)
				}
				if f.level == 9 || f.level == 0 && f.max == newest0 {
					continue
				}
				if base != nil && f.max <= base.max {
					t.Errorf("round %d: %s keeps level-%d file %s-%s below its base snapshot %s", round, pp.id, f.level, f.min, f.max, base.max)
				}
				if f.level == 0 && f.created.Before(cut) && (f.min > 1 || base != nil) {
					// The history's first file stays until there is a base.
					t.Errorf("round %d: %s keeps level-0 file %s-%s of %s", round, pp.id, f.min, f.max, f.created.Format(time.StampMilli))
				}
			}
			if low > 1 && low != 1<<62 {
				pruned++
			}
			// The history's first level-0 file stays until there is a
			// base: a compacted file is timed as its newest input, so
			// without it a time before that finds nothing of the file.
			first, based := false, false
			for _, f := range files {
				first = first || f.level == 0 && f.min == 1
				based = based || f.level == 9 && f.created.Before(stopped.Add(-window))
			}
			if len(files) > 0 && !first && !based {
				t.Errorf("round %d: %s lost its history's first level-0 file, with no snapshot older than the window", round, pp.id)
			}
			// After a clean stop the local state holds one level-0 file,
			// the target's newest (a ship carries on from it): every file
			// was let go of with its history on the target.
			newest := ""
			for _, f := range files {
				if f.level == 0 && f.max == newest0 {
					newest = ltx.FormatFilename(f.min, f.max)
				}
			}
			local, _ := filepath.Glob(filepath.Join(data, "replication", "people", pp.id, "person.db", "ltx", "0", "*.ltx"))
			if len(local) > 1 || len(local) == 1 && filepath.Base(local[0]) != newest {
				names := make([]string, len(local))
				for i, l := range local {
					names[i] = filepath.Base(l)
				}
				t.Errorf("round %d: %s's local state keeps level-0 files %v, the target's newest is %q", round, pp.id, names, newest)
			}
		}

		// The newest position: equal to the live data.
		out := filepath.Join(t.TempDir(), "newest")
		if o, e, code := nahRunEnv(t, tg.env, "restore", "-from", tg.url, "-to", out); code != 0 {
			t.Fatalf("round %d: nah restore: exit %d\n%s%s\nthe server said:\n%.3000s", round, code, o, e, p.log())
		}
		sameData(t, data, out)

		// A time inside the window, for the whole server.
		at := stopped.Add(-window + time.Second + time.Duration(rng.Int64N(int64(window-2*time.Second))))
		out = filepath.Join(t.TempDir(), "at")
		if o, e, code := nahRunEnv(t, tg.env, "restore", "-from", tg.url, "-to", out, "-time", at.UTC().Format(time.RFC3339Nano)); code != 0 {
			t.Fatalf("round %d: nah restore -time %s: exit %d\n%s%s", round, at.Format(time.StampMilli), code, o, e)
		}
		var lags []time.Duration
		for _, pp := range all {
			lags = append(lags, asOf(t, fmt.Sprintf("round %d: nah restore -time: %s", round, pp.id), filepath.Join(out, "people", pp.id, "person.db"), pp.ops, at))
		}

		// Litestream's own command, each person at a time of their own
		// (a third of them: a process each), and one at the newest.
		for i, pp := range all {
			if i%3 != round%3 {
				continue
			}
			rel := "people/" + pp.id + "/person.db"
			// Litestream's command refuses a time after the newest file of
			// the history (its time bounds): a time within both.
			var newest time.Time
			for _, f := range tg.list(t, rel) {
				if f.created.After(newest) {
					newest = f.created
				}
			}
			from, to := stopped.Add(-window+time.Second), stopped.Add(-time.Second)
			if newest.Before(to) {
				to = newest
			}
			if !to.After(from) {
				continue
			}
			at := from.Add(time.Duration(rng.Int64N(int64(to.Sub(from)))))
			o := filepath.Join(t.TempDir(), "p.db")
			cmd := exec.Command(cli, "restore", "-o", o, "-timestamp", at.UTC().Format(time.RFC3339Nano), tg.cliURL(rel))
			// Litestream's S3 client refuses AWS_CA_BUNDLE, which machines
			// of this kind set.
			cmd.Env = append(slices.DeleteFunc(os.Environ(), func(v string) bool { return strings.HasPrefix(v, "AWS_CA_BUNDLE=") }), tg.env...)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("round %d: litestream restore -timestamp %s %s: %v\n%s", round, at.Format(time.StampMilli), rel, err, b)
				continue
			}
			if err := store.IntegrityCheck(context.Background(), o); err != nil {
				t.Errorf("round %d: litestream restore %s: %v", round, rel, err)
				continue
			}
			lags = append(lags, asOf(t, fmt.Sprintf("round %d: litestream restore -timestamp: %s", round, pp.id), o, pp.ops, at))
		}
		slices.Sort(lags)
		t.Logf("round %d: %d posts so far; %d of %d people's history pruned below TXID 1; a restore to a time lands within %v of it (median %v)",
			round, posts.Load(), pruned, people, lags[len(lags)-1].Round(time.Millisecond), lags[len(lags)/2].Round(time.Millisecond))
	}

	// caughtUp waits until the server's retention has looked at every
	// file due (a pass keeps to half a core, and under the test's load,
	// every file written every second, it falls behind) and returns when
	// that was last seen.
	caughtUp := func(p *proc) time.Time {
		t.Helper()
		addr := ""
		for deadline := time.Now().Add(5 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if m := regexp.MustCompile(`msg=metrics listen=(\S+)`).FindStringSubmatch(p.log()); m != nil {
				addr = m[1]
			}
		}
		for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			at := time.Now()
			res, err := client.Get("http://" + addr + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if regexp.MustCompile(`(?m)^nah_retention_overdue_files 0$`).Match(b) {
				return at
			}
		}
		t.Fatalf("retention still had files overdue 90 s after the writes")
		return time.Time{}
	}
	run(p, 1, 10*time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	p = start(t, data, env...)
	run(p, 2, 10*time.Second)
	seen := caughtUp(p)
	p.stop(t)
	check(seen, time.Now(), 1)
	p = start(t, data, env...)
	run(p, 3, 14*time.Second)
	seen = caughtUp(p)
	p.stop(t)
	check(seen, time.Now(), 2)
	if pruned == 0 {
		t.Errorf("no history was pruned: the test proved nothing of deletion")
	}
}

// asOf checks that the moments of the person file at got are exactly
// those of a prefix of ops (their acknowledged writes, in order), none of
// them started at or after at, and returns how far before at the first
// write left out was acknowledged (zero: none).
func asOf(t *testing.T, what, got string, ops []retainOp, at time.Time) time.Duration {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+got+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query("SELECT id FROM moments ORDER BY id")
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return 0
	}
	var have []string
	for rows.Next() {
		var id string
		rows.Scan(&id)
		have = append(have, id)
	}
	rows.Close()
	want := map[string]bool{}
	match := func() bool {
		if len(want) != len(have) {
			return false
		}
		for _, id := range have {
			if !want[id] {
				return false
			}
		}
		return true
	}
	k := -1
	if match() {
		k = 0
	}
	for i, op := range ops {
		if op.start.After(at) {
			break
		}
		if op.add {
			want[op.id] = true
		} else {
			delete(want, op.id)
		}
		if match() {
			k = i + 1
		}
	}
	if k < 0 {
		t.Errorf("%s: %d moments, no state the person had before %s", what, len(have), at.Format(time.StampMilli))
		return 0
	}
	if k < len(ops) && ops[k].end.Before(at) {
		return at.Sub(ops[k].end)
	}
	return 0
}
