package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/bench/fixture"
	"github.com/superfly/ltx"
)

// SoakResult is one soak (bench/THRESHOLDS.md, "The replica over time"):
// minutes of a steady mixed load, the disk sampled every 30 s. Written to
// bench/results/soak-NAME-TIME.json.
type SoakResult struct {
	Fixture   string    `json:"fixture"`
	Time      time.Time `json:"time"`
	Cores     int       `json:"cores"`
	GoVersion string    `json:"go_version"`
	Binary    string    `json:"binary"`
	Env       []string  `json:"env,omitempty"`
	Seconds   float64   `json:"seconds"` // of load
	PostsPerS float64   `json:"posts_per_s_asked"`
	FeedsPerS float64   `json:"feeds_per_s_asked"`
	BodyBytes int       `json:"body_bytes"` // of each moment
	Posts     Latency   `json:"posts"`
	Feeds     Latency   `json:"feeds"`
	Stopped   bool      `json:"cut_short,omitempty"` // interrupted: the samples so far

	// Growth over the whole soak, and over its first and last thirds, in
	// bytes per hour of writes; ShippedPerWritten is the replica's bytes
	// shipped per byte of moments posted.
	PerHour           SoakGrowth   `json:"per_hour"`
	FirstThird        SoakGrowth   `json:"first_third_per_hour"`
	LastThird         SoakGrowth   `json:"last_third_per_hour"`
	ShippedPerWritten float64      `json:"shipped_per_written"`
	Samples           []SoakSample `json:"samples"`
}

// SoakGrowth is how fast each measured thing grew, in bytes per hour.
type SoakGrowth struct {
	Live    float64 `json:"live"`
	WAL     float64 `json:"wal"`
	State   float64 `json:"replication_state"`
	Replica float64 `json:"replica"`
	Shipped float64 `json:"shipped"`
	Written float64 `json:"written"`
}

// DirUse is the bytes and the count of a kind of file.
type DirUse struct {
	Bytes int64 `json:"bytes"`
	Files int   `json:"files"`
}

// SoakSample is the disk at one moment of the soak.
type SoakSample struct {
	S       float64 `json:"s"`     // since the load began
	Posts   int64   `json:"posts"` // answered 201 so far
	Written int64   `json:"written_bytes"`
	Live    DirUse  `json:"live"`              // *.db outside replication/: people/*/person.db and directory.db
	WAL     DirUse  `json:"wal"`               // *-wal outside replication/
	State   DirUse  `json:"replication_state"` // DATA/replication/
	Replica DirUse  `json:"replica"`           // the target directory
	// Shipped is every LTX file that appeared on the replica since the
	// load began, summed at the size first seen (names are remembered:
	// retention deletes files, so the replica's size is not it).
	Shipped DirUse `json:"shipped"`
	// MissedL0 counts gaps in a database's level-0 TXIDs between the
	// files seen: files that came and went between two listings, whose
	// bytes Shipped lacks.
	MissedL0 int     `json:"missed_level0"`
	LagS     float64 `json:"lag_s"`
	Queue    int     `json:"queue"`
	RSSMB    float64 `json:"rss_mb"`
	Deleted  float64 `json:"retention_deleted_files"`
	Snapshot float64 `json:"retention_snapshots"`
	// Watched is the files Litestream watches; TakeUps how many were
	// handed to it so far (both from the metrics).
	Watched float64 `json:"files_watched"`
	TakeUps float64 `json:"takeups"`
}

// soakScan is how often the replica's names are listed between samples:
// an LTX file that lives less than this (level 0 between compactions) can
// be missed.
const soakScan = 5 * time.Second

func soakCmd(ctx context.Context, args []string) error {
	fset := flag.NewFlagSet("soak", flag.ExitOnError)
	name, bin, cache, out := commonFlags(fset)
	d := fset.Duration("for", 30*time.Minute, "length of the load")
	every := fset.Duration("every", 30*time.Second, "time between samples")
	posts := fset.Float64("posts", 60, "posts a second, by people drawn with the fixture's posting rates")
	feeds := fset.Float64("feeds", 50, "feeds read a second, by people drawn uniformly")
	show := fset.String("show", "", "print the tables of this soak's result file, and run nothing")
	var env envList
	fset.Var(&env, "env", "KEY=VALUE for the server's environment, repeatable (e.g. NAH_RETENTION=5m)")
	fset.Parse(args)
	if *show != "" {
		raw, err := os.ReadFile(*show)
		if err != nil {
			return err
		}
		var res SoakResult
		if err := json.Unmarshal(raw, &res); err != nil {
			return fmt.Errorf("%s: %w", *show, err)
		}
		fmt.Print(soakMarkdown(res))
		return nil
	}
	f, ok := fixture.Fixtures[*name]
	if !ok {
		usage()
	}
	data, people, cleanup, err := copyFixture(ctx, *cache, f)
	if err != nil {
		return err
	}
	defer cleanup()
	mix, err := mixOf(f, people)
	if err != nil {
		return err
	}
	repl := filepath.Join(filepath.Dir(data), "replica")
	s, err := startServer(*bin, data, repl, env)
	if err != nil {
		return err
	}
	defer s.cmd.Process.Kill()
	// Every file's first ship after a start is a whole snapshot; a server
	// that has been running has paid them, so the soak begins after them.
	fmt.Fprintf(os.Stderr, "warm-up: everyone posts once\n")
	warmLoad(ctx, s.base, people, 16)
	if _, err := waitReplicated(ctx, s.metrics, 5*time.Minute); err != nil {
		return err
	}
	res := SoakResult{Fixture: f.Name, Time: time.Now().UTC(), Cores: runtime.NumCPU(), GoVersion: runtime.Version(),
		Binary: *bin, Env: env, PostsPerS: *posts, FeedsPerS: *feeds, BodyBytes: 400}
	res.Posts, res.Feeds, res.Samples = soak(ctx, s, data, repl, people, mix, *d, *every, *posts, *feeds)
	res.Stopped = ctx.Err() != nil
	if err := s.stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop:", err)
	}
	res.summarise()
	file, err := writeResult(*out, "soak-"+f.Name, res.Time, res)
	if err != nil {
		return err
	}
	fmt.Print(soakMarkdown(res))
	fmt.Printf("\nwritten to %s\n", file)
	return nil
}

// soak runs the load for d (or until ctx ends) and samples the disk every
// every, the first sample as the load begins.
func soak(ctx context.Context, s *server, data, repl string, people []fixture.Person, mix func(*rand.Rand) int, d, every time.Duration, postsPerS, feedsPerS float64) (Latency, Latency, []SoakSample) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var ok atomic.Int64
	body := make([]byte, 400)
	for i := range body {
		body[i] = byte(i * 7)
	}
	payload := []byte(`{"body":"` + base64.StdEncoding.EncodeToString(body) + `"}`)
	post := nahPost(s.base, people, payload)
	feedReqs := make([]*http.Request, len(people))
	for i, p := range people {
		feedReqs[i], _ = http.NewRequest("GET", s.base+"/api/v1/feed", nil)
		feedReqs[i].Header.Set("Authorization", "Bearer "+p.Token)
	}
	pc, fc := newClient(16), newClient(8)
	var postLat, feedLat Latency
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() {
		postLat = paced(ctx, 16, postsPerS, func(rng *rand.Rand) bool {
			r, err := pc.Do(post(ctx, mix(rng)))
			if err != nil {
				return false
			}
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
			if r.StatusCode != 201 {
				return false
			}
			ok.Add(1)
			return true
		})
	})
	wg.Go(func() {
		feedLat = paced(ctx, 8, feedsPerS, func(rng *rand.Rand) bool {
			_, good := get(ctx, fc, feedReqs[rng.IntN(len(feedReqs))])
			return good
		})
	})

	ships := newShipLog(scanLTX(repl))
	var samples []SoakSample
	sample := func() {
		n := ok.Load()
		sm := SoakSample{S: time.Since(start).Seconds(), Posts: n, Written: n * 400, Shipped: ships.shipped, MissedL0: ships.missed}
		sm.Live, sm.WAL, sm.State = dataUse(data)
		for _, f := range scanLTX(repl) {
			sm.Replica.Bytes += f.Bytes
			sm.Replica.Files++
		}
		sm.LagS, sm.Queue, _ = readLag(s.metrics)
		sm.RSSMB = procStatusMB(s.cmd.Process.Pid, "VmRSS")
		m := readMetrics(s.metrics)
		sm.Deleted, sm.Snapshot = m["nah_retention_deleted_files"], m["nah_retention_snapshots"]
		sm.Watched, sm.TakeUps = m["nah_replica_files_watched"], m["nah_replica_takeups_total"]
		samples = append(samples, sm)
		fmt.Fprintf(os.Stderr, "%4.0f s: %d posts, live %.0f MB, wal %.0f MB (%d), state %.0f MB, replica %.0f MB (%d files), shipped %.0f MB, lag %.1f s\n",
			sm.S, n, mb(sm.Live.Bytes), mb(sm.WAL.Bytes), sm.WAL.Files, mb(sm.State.Bytes), mb(sm.Replica.Bytes), sm.Replica.Files, mb(ships.shipped.Bytes), sm.LagS)
	}
	sample()
	scan := time.NewTicker(soakScan)
	defer scan.Stop()
	next := start.Add(every)
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-scan.C:
		}
		ships.add(scanLTX(repl))
		if now := time.Now(); !now.Before(next) || ctx.Err() != nil {
			sample()
			next = next.Add(every)
		}
	}
	wg.Wait()
	return postLat, feedLat, samples
}

// shipLog remembers the replica's LTX files by name and sums the new
// ones. A database's level-0 files follow each other's TXIDs, so a jump
// past the highest seen is a file missed.
type shipLog struct {
	seen    map[string]bool
	last    map[string]ltx.TXID // a database's highest level-0 TXID seen
	shipped DirUse
	missed  int
}

// newShipLog starts from the files already there, which count as old.
func newShipLog(files map[string]ltxFile) *shipLog {
	l := &shipLog{seen: map[string]bool{}, last: map[string]ltx.TXID{}}
	l.add(files)
	l.shipped, l.missed = DirUse{}, 0
	return l
}

// add counts the files not seen before, in order of name (of TXIDs).
func (l *shipLog) add(files map[string]ltxFile) {
	var fresh []string
	for rel := range files {
		if !l.seen[rel] {
			fresh = append(fresh, rel)
		}
	}
	sort.Strings(fresh)
	for _, rel := range fresh {
		f := files[rel]
		l.seen[rel] = true
		l.shipped.Bytes += f.Bytes
		l.shipped.Files++
		lo, hi, err := ltx.ParseFilename(filepath.Base(rel))
		if f.Level != "0" || err != nil {
			continue
		}
		if last, ok := l.last[f.DB]; ok && lo > last+1 {
			l.missed++
		}
		l.last[f.DB] = max(l.last[f.DB], hi)
	}
}

// paced calls do about perS times a second from workers goroutines until
// ctx ends; a call the workers are too busy for is skipped, not queued.
func paced(ctx context.Context, workers int, perS float64, do func(*rand.Rand) bool) Latency {
	tokens := make(chan struct{})
	var (
		mu      sync.Mutex
		samples []time.Duration
		errs    atomic.Int64
		wg      sync.WaitGroup
	)
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 37))
			var local []time.Duration
			for {
				select {
				case <-ctx.Done():
					mu.Lock()
					samples = append(samples, local...)
					mu.Unlock()
					return
				case <-tokens:
				}
				t := time.Now()
				if do(rng) {
					local = append(local, time.Since(t))
				} else if ctx.Err() == nil {
					errs.Add(1)
				}
			}
		})
	}
	if perS > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / perS))
	tick:
		for {
			select {
			case <-ctx.Done():
				break tick
			case <-t.C:
				select {
				case tokens <- struct{}{}:
				default:
				}
			}
		}
		t.Stop()
	}
	wg.Wait()
	return summarise(workers, time.Since(start), samples, int(errs.Load()), 0)
}

// dataUse is the data directory's live databases (*.db), WALs (*-wal) and
// local replication state (replication/, whatever its files).
func dataUse(data string) (live, wal, state DirUse) {
	stateDir := filepath.Join(data, nah.ReplicationRel) + string(filepath.Separator)
	filepath.WalkDir(data, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return nil
		}
		switch {
		case strings.HasPrefix(p, stateDir):
			state.Bytes += info.Size()
			state.Files++
		case strings.HasSuffix(p, "-wal"):
			wal.Bytes += info.Size()
			wal.Files++
		case strings.HasSuffix(p, ".db"):
			live.Bytes += info.Size()
			live.Files++
		}
		return nil
	})
	return live, wal, state
}

// readMetrics reads every unlabelled metric of the server (nil when it
// cannot).
func readMetrics(url string) map[string]float64 {
	r, err := http.Get(url)
	if err != nil {
		return nil
	}
	defer r.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(r.Body)
	for sc.Scan() {
		name, v, found := strings.Cut(sc.Text(), " ")
		if n, err := strconv.ParseFloat(v, 64); found && err == nil {
			m[name] = n
		}
	}
	return m
}

// growth is what each thing grew between samples a and b, per hour.
func growth(a, b SoakSample) SoakGrowth {
	h := (b.S - a.S) / 3600
	if h <= 0 {
		return SoakGrowth{}
	}
	per := func(x, y int64) float64 { return float64(y-x) / h }
	return SoakGrowth{
		Live: per(a.Live.Bytes, b.Live.Bytes), WAL: per(a.WAL.Bytes, b.WAL.Bytes),
		State: per(a.State.Bytes, b.State.Bytes), Replica: per(a.Replica.Bytes, b.Replica.Bytes),
		Shipped: per(a.Shipped.Bytes, b.Shipped.Bytes), Written: per(a.Written, b.Written),
	}
}

// nearest is the sample closest to s seconds.
func nearest(samples []SoakSample, s float64) SoakSample {
	best := samples[0]
	for _, x := range samples {
		if abs(x.S-s) < abs(best.S-s) {
			best = x
		}
	}
	return best
}

func abs(x float64) float64 { return max(x, -x) }

// summarise fills the growth figures from the samples.
func (r *SoakResult) summarise() {
	if len(r.Samples) < 2 {
		return
	}
	first, last := r.Samples[0], r.Samples[len(r.Samples)-1]
	r.Seconds = last.S
	r.PerHour = growth(first, last)
	r.FirstThird = growth(first, nearest(r.Samples, last.S/3))
	r.LastThird = growth(nearest(r.Samples, 2*last.S/3), last)
	if w := last.Written - first.Written; w > 0 {
		r.ShippedPerWritten = float64(last.Shipped.Bytes-first.Shipped.Bytes) / float64(w)
	}
}

// soakMarkdown is a soak's tables: growth per hour of writes, first third
// against last, and the curve.
func soakMarkdown(r SoakResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### soak, %s, %s (%d cores, %s)\n\n", r.Fixture, r.Time.Format("2006-01-02 15:04 UTC"), r.Cores, r.GoVersion)
	fmt.Fprintf(&b, "`%s`, settings `%s`; %.1f min of load", r.Binary, strings.Join(r.Env, " "), r.Seconds/60)
	if r.Stopped {
		b.WriteString(" (cut short)")
	}
	fmt.Fprintf(&b, ": posts %.1f/s asked, %.1f/s done (p95 %.1f ms, %d errors); feeds %.1f/s done (p95 %.1f ms, %d errors).\n\n",
		r.PostsPerS, r.Posts.PerSecond, r.Posts.P95ms, r.Posts.Errors, r.Feeds.PerSecond, r.Feeds.P95ms, r.Feeds.Errors)
	if len(r.Samples) < 2 {
		return b.String()
	}
	first, last := r.Samples[0], r.Samples[len(r.Samples)-1]
	b.WriteString("| | start MB | end MB | files | MB/hour | first third MB/h | last third MB/h |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	row := func(name string, a, z DirUse, all, f3, l3 float64) {
		files := fmt.Sprintf("%d → %d", a.Files, z.Files)
		if a.Files == 0 && z.Files == 0 {
			files = ""
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %s | %.0f | %.0f | %.0f |\n", name, mb(a.Bytes), mb(z.Bytes), files, all/(1<<20), f3/(1<<20), l3/(1<<20))
	}
	g, f3, l3 := r.PerHour, r.FirstThird, r.LastThird
	row("live databases", first.Live, last.Live, g.Live, f3.Live, l3.Live)
	row("WALs", first.WAL, last.WAL, g.WAL, f3.WAL, l3.WAL)
	db := func(s SoakSample) DirUse {
		return DirUse{Bytes: s.Live.Bytes + s.WAL.Bytes, Files: s.Live.Files + s.WAL.Files}
	}
	row("databases with their WALs", db(first), db(last), g.Live+g.WAL, f3.Live+f3.WAL, l3.Live+l3.WAL)
	row("replication state", first.State, last.State, g.State, f3.State, l3.State)
	row("replica", first.Replica, last.Replica, g.Replica, f3.Replica, l3.Replica)
	row("shipped (LTX files seen)", first.Shipped, last.Shipped, g.Shipped, f3.Shipped, l3.Shipped)
	row("written (moments x 400 B)", DirUse{Bytes: first.Written}, DirUse{Bytes: last.Written}, g.Written, f3.Written, l3.Written)
	fmt.Fprintf(&b, "\nshipped per byte written: %.1f (the soak began after everyone had posted once and the replica held it); level-0 files missed between listings: %d.", r.ShippedPerWritten, last.MissedL0)
	if d := g.Live + g.WAL; d > 0 {
		fmt.Fprintf(&b, " The replica grew %.1fx as fast as the databases with their WALs.", g.Replica/d)
	}
	b.WriteString("\n\n")
	b.WriteString("| s | posts | live MB | WAL MB | state MB | replica MB | replica files | shipped MB | lag s | watched | deleted by retention |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, s := range r.Samples {
		fmt.Fprintf(&b, "| %.0f | %d | %.1f | %.1f | %.1f | %.1f | %d | %.1f | %.1f | %.0f | %.0f |\n", s.S, s.Posts, mb(s.Live.Bytes), mb(s.WAL.Bytes), mb(s.State.Bytes), mb(s.Replica.Bytes), s.Replica.Files, mb(s.Shipped.Bytes), s.LagS, s.Watched, s.Deleted)
	}
	return b.String()
}
