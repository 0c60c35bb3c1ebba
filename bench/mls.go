package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/nah-app/nah/bench/fixture"
	"github.com/nah-app/nah/internal/mlswire"
)

// The delivery service's cost (bench/THRESHOLDS.md, "MLS delivery"), on a
// fresh server started from the release binary: R owners each connected to
// the same 150 members, every member with one MLS client and KeyPackages.
// Per run r, owner r claims a KeyPackage of each of the 150 members (150
// claims), then posts one commit adding those 150 clients to its group,
// with the Welcome and a GroupInfo. Then each member's own group gets the
// first owner's client and a week of commits, and the first owner's phone
// fetches the commits of all 150 groups after the epoch it joined at,
// following next.

const (
	mlsMembers = 150
	// mlsTreeBytes is the GroupInfo's ratchet tree of a 151-member group,
	// as ts-mls 1.6.4 makes it (38 KB, /work/mls-api.md, mls-phone).
	mlsTreeBytes = 38 << 10
	// mlsWeekGroup is the group size the week's commit paths are sized
	// for: log2(16) = 4 UpdatePathNodes, an 892-byte commit.
	mlsWeekGroup = 16
)

// MLSResult is bench mls's result, written to bench/results/mls-TIME.json.
type MLSResult struct {
	Time        time.Time `json:"time"`
	Cores       int       `json:"cores"`
	GoVersion   string    `json:"go_version"`
	Binary      string    `json:"binary"`
	LoadBefore  string    `json:"loadavg_before"` // /proc/loadavg as the run started and ended
	LoadAfter   string    `json:"loadavg_after"`
	Members     int       `json:"members"`
	Runs        int       `json:"runs"`
	WeekCommits int       `json:"week_commits"` // commits a group in the week fetched

	Claim  MLSPhase `json:"claim_150"`
	Commit MLSPhase `json:"commit_add_150"`
	Fetch  MLSPhase `json:"fetch_week_150_groups"`
}

// MLSPhase is one measured operation over its runs.
type MLSPhase struct {
	Requests int       `json:"requests_a_run"`
	P50ms    float64   `json:"p50_ms"` // of every request of every run
	P95ms    float64   `json:"p95_ms"`
	MaxMs    float64   `json:"max_ms"`
	WallMs   []float64 `json:"wall_ms"`        // each run, its requests one after another
	CPUms    []float64 `json:"cpu_ms"`         // the server's CPU in each run, /proc/PID/stat (10 ms ticks)
	SentB    int64     `json:"sent_mls_bytes"` // the MLS messages a run sends (before base64)
	GotB     int64     `json:"got_bytes"`      // response bodies of one run (JSON)
}

// mlsPerson is a person of the bench with their one MLS client.
type mlsPerson struct {
	fixture.Person
	client string
	key    ed25519.PrivateKey
}

func mlsCmd(ctx context.Context, args []string) error {
	fset := flag.NewFlagSet("mls", flag.ExitOnError)
	_, bin, _, out := commonFlags(fset)
	runs := fset.Int("runs", 5, "owners, so runs of the claim and the commit; and sweeps of the fetch")
	week := fset.Int("week", 7, "commits in each member's group in the week fetched (one a day)")
	fset.Parse(args)
	if *runs < 1 || *runs > 50 {
		return fmt.Errorf("-runs is 1 to 50 (each member has at most %d unclaimed KeyPackages a client)", 100)
	}
	res := MLSResult{Time: time.Now().UTC(), Cores: runtime.NumCPU(), GoVersion: runtime.Version(), Binary: *bin,
		LoadBefore: loadAvg(), Members: mlsMembers, Runs: *runs, WeekCommits: *week}
	work, err := os.MkdirTemp("", "nah-bench-mls")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	s, err := startServer(*bin, filepath.Join(work, "data"), filepath.Join(work, "replica"), []string{"NAH_OPEN_SIGNUP=true", "NAH_SIGNUP_PER_HOUR=0"})
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped { // stop waits for the one exit: a second call would wait stopLimit
			s.stop()
		}
	}()
	pid := s.cmd.Process.Pid
	c := newClient(8)
	defer c.CloseIdleConnections()

	owners, members, err := mlsSeed(ctx, c, s.base, *runs)
	if err != nil {
		return err
	}
	var claimed [][][]byte // claimed[r]: owner r's 150 KeyPackages
	var claimLat, commitLat []time.Duration
	for _, o := range owners {
		var kps [][]byte
		var lat []time.Duration
		cpu0, _ := procCPUms(pid)
		t0 := time.Now()
		for _, m := range members {
			var got struct {
				KeyPackages []struct {
					KeyPackage []byte `json:"key_package"`
				} `json:"key_packages"`
			}
			n, took, err := mlsDo(ctx, c, s.base, "POST", "/api/v1/people/"+m.ID+"/key_packages/claim", o.Token, nil, 200, &got)
			if err != nil {
				return err
			}
			if len(got.KeyPackages) != 1 {
				return fmt.Errorf("claim of %s: %d KeyPackages, want 1", m.Handle, len(got.KeyPackages))
			}
			kps = append(kps, got.KeyPackages[0].KeyPackage)
			lat = append(lat, took)
			res.Claim.GotB += int64(n)
		}
		res.Claim.WallMs = append(res.Claim.WallMs, ms(time.Since(t0)))
		cpu1, _ := procCPUms(pid)
		res.Claim.CPUms = append(res.Claim.CPUms, cpu1-cpu0)
		claimed = append(claimed, kps)
		claimLat = append(claimLat, lat...)
	}
	res.Claim.Requests, res.Claim.GotB = mlsMembers, res.Claim.GotB/int64(len(owners))

	for r, o := range owners {
		gid := []byte("nah:" + o.ID)
		body := map[string][]byte{
			"commit":     mlswire.Commit(gid, 0, 0, mlswire.UpdatePath(o.key, o.client, mlsMembers+1), mlswire.Adds(claimed[r])...),
			"welcome":    mlswire.Welcome(mlsTreeBytes+1000, mlswire.Refs(claimed[r])...),
			"group_info": mlswire.GroupInfo(gid, 1, mlsTreeBytes),
		}
		res.Commit.SentB = int64(len(body["commit"]) + len(body["welcome"]) + len(body["group_info"]))
		cpu0, _ := procCPUms(pid)
		_, took, err := mlsDo(ctx, c, s.base, "POST", "/api/v1/people/"+o.ID+"/group/commits", o.Token, body, 201, nil)
		if err != nil {
			return err
		}
		cpu1, _ := procCPUms(pid)
		res.Commit.WallMs = append(res.Commit.WallMs, ms(took))
		res.Commit.CPUms = append(res.Commit.CPUms, cpu1-cpu0)
		commitLat = append(commitLat, took)
	}
	res.Commit.Requests = 1

	reader := owners[0]
	if err := mlsWeek(ctx, c, s.base, reader, members, *week); err != nil {
		return err
	}
	var fetchLat []time.Duration
	for range owners {
		var got int64
		requests := 0
		cpu0, _ := procCPUms(pid)
		t0 := time.Now()
		for _, m := range members {
			after := "1" // the epoch the reader's client joined at
			for n := 0; ; n++ {
				var page struct {
					Commits []struct {
						Epoch uint64 `json:"epoch"`
					} `json:"commits"`
					Next *uint64 `json:"next"`
				}
				b, took, err := mlsDo(ctx, c, s.base, "GET", "/api/v1/people/"+m.ID+"/group/commits?after="+after, reader.Token, nil, 200, &page)
				if err != nil {
					return err
				}
				got += int64(b)
				requests++
				fetchLat = append(fetchLat, took)
				n += len(page.Commits)
				if page.Next == nil {
					if n != *week {
						return fmt.Errorf("%s's group: %d commits after epoch 1, want %d", m.Handle, n, *week)
					}
					break
				}
				after = strconv.FormatUint(*page.Next, 10)
			}
		}
		res.Fetch.WallMs = append(res.Fetch.WallMs, ms(time.Since(t0)))
		cpu1, _ := procCPUms(pid)
		res.Fetch.CPUms = append(res.Fetch.CPUms, cpu1-cpu0)
		res.Fetch.Requests, res.Fetch.GotB = requests, got
	}
	for _, p := range []struct {
		into *MLSPhase
		lat  []time.Duration
	}{{&res.Claim, claimLat}, {&res.Commit, commitLat}, {&res.Fetch, fetchLat}} {
		l := summarise(1, 0, p.lat, 0, 0)
		p.into.P50ms, p.into.P95ms, p.into.MaxMs = l.P50ms, l.P95ms, l.MaxMs
	}
	res.LoadAfter = loadAvg()
	stopped = true
	if err := s.stop(); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	file, err := writeResult(*out, "mls", res.Time, res)
	if err != nil {
		return err
	}
	fmt.Print(mlsMarkdown(res))
	fmt.Printf("\nwritten to %s\n", file)
	return nil
}

// mlsSeed signs up runs owners and 150 members, connects every owner to
// every member, gives each person a client (members upload runs
// KeyPackages and a last-resort one) and registers each owner's group.
func mlsSeed(ctx context.Context, c *http.Client, base string, runs int) (owners, members []mlsPerson, err error) {
	people := make([]mlsPerson, runs+mlsMembers)
	err = parallel(ctx, len(people), 4, "sign-ups and clients", func(i int) error {
		var acct struct {
			Person struct {
				ID string `json:"id"`
			} `json:"person"`
			Token string `json:"token"`
		}
		h := fmt.Sprintf("m%04d", i)
		if i < runs {
			h = fmt.Sprintf("owner%02d", i)
		}
		if err := nahCall(ctx, c, "POST", base+"/api/v1/accounts", "", map[string]string{"handle": h, "password": fixture.Password}, 201, &acct); err != nil {
			return err
		}
		_, key, _ := ed25519.GenerateKey(rand.Reader)
		p := mlsPerson{Person: fixture.Person{ID: acct.Person.ID, Handle: h, Token: acct.Token}, key: key}
		var cl struct {
			ID string `json:"id"`
		}
		if err := nahCall(ctx, c, "POST", base+"/api/v1/me/clients", p.Token, map[string]any{"signature_key": []byte(key.Public().(ed25519.PublicKey)), "name": h + "'s phone"}, 201, &cl); err != nil {
			return err
		}
		p.client = cl.ID
		people[i] = p
		if i < runs {
			return nahCall(ctx, c, "POST", base+"/api/v1/people/"+p.ID+"/group", p.Token, map[string]any{"client": p.client, "group_id": []byte("nah:" + p.ID)}, 201, nil)
		}
		var kps [][]byte
		for range runs {
			kps = append(kps, mlswire.KeyPackage(key, p.client))
		}
		return nahCall(ctx, c, "POST", base+"/api/v1/me/clients/"+p.client+"/key_packages", p.Token, map[string]any{"key_packages": kps, "last_resort": mlswire.KeyPackage(key, p.client)}, 200, nil)
	})
	if err != nil {
		return nil, nil, err
	}
	owners, members = people[:runs], people[runs:]
	err = parallel(ctx, runs*mlsMembers, 4, "connections", func(k int) error {
		o, m := owners[k/mlsMembers], members[k%mlsMembers]
		var inv struct {
			Code string `json:"code"`
		}
		if err := nahCall(ctx, c, "POST", base+"/api/v1/invites", o.Token, nil, 201, &inv); err != nil {
			return err
		}
		return nahCall(ctx, c, "POST", base+"/api/v1/connections", m.Token, map[string]string{"code": inv.Code}, 201, nil)
	})
	return owners, members, err
}

// mlsWeek gives each member a group whose first commit adds reader's
// client (epoch 1), followed by week commits of the member's client with a
// path, as a daily key update would be.
func mlsWeek(ctx context.Context, c *http.Client, base string, reader mlsPerson, members []mlsPerson, week int) error {
	return parallel(ctx, len(members), 4, "a week of commits in each member's group", func(i int) error {
		m := members[i]
		gid := []byte("nah:" + m.ID)
		if err := nahCall(ctx, c, "POST", base+"/api/v1/people/"+m.ID+"/group", m.Token, map[string]any{"client": m.client, "group_id": gid}, 201, nil); err != nil {
			return err
		}
		kp := mlswire.KeyPackage(reader.key, reader.client)
		add := map[string][]byte{"commit": mlswire.Commit(gid, 0, 0, mlswire.UpdatePath(m.key, m.client, 2), mlswire.Add(kp)), "welcome": mlswire.Welcome(1000, mlswire.Ref(kp))}
		if err := nahCall(ctx, c, "POST", base+"/api/v1/people/"+m.ID+"/group/commits", m.Token, add, 201, nil); err != nil {
			return err
		}
		for e := range week {
			body := map[string][]byte{"commit": mlswire.Commit(gid, uint64(e+1), 0, mlswire.UpdatePath(m.key, m.client, mlsWeekGroup))}
			if err := nahCall(ctx, c, "POST", base+"/api/v1/people/"+m.ID+"/group/commits", m.Token, body, 201, nil); err != nil {
				return err
			}
		}
		return nil
	})
}

// mlsDo is one timed request: the response body's size and the time to
// its last byte.
func mlsDo(ctx context.Context, c *http.Client, base, method, path, token string, in any, want int, out any) (int, time.Duration, error) {
	var n countingWriter
	t0 := time.Now()
	err := nahCall(ctx, c, method, base+path, token, in, want, &jsonCounter{&n, out})
	return int(n), time.Since(t0), err
}

type countingWriter int

// jsonCounter unmarshals into out and counts the bytes it was given.
type jsonCounter struct {
	n   *countingWriter
	out any
}

func (j *jsonCounter) UnmarshalJSON(b []byte) error {
	*j.n = countingWriter(len(b))
	if j.out == nil {
		return nil
	}
	return json.Unmarshal(b, j.out)
}

// loadAvg is /proc/loadavg's three load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func mlsMarkdown(r MLSResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### mls, %s (%d cores, %s, load average %s at the start, %s at the end)\n\n", r.Time.Format("2006-01-02 15:04 UTC"), r.Cores, r.GoVersion, r.LoadBefore, r.LoadAfter)
	fmt.Fprintf(&b, "A fresh server: %d owners each connected to the same %d members, one MLS client each; %d runs.\n\n", r.Runs, r.Members, r.Runs)
	b.WriteString("| what | requests a run | p50 ms | p95 ms | max ms | wall a run, median (ms) | server CPU a run, median (ms) | MLS bytes sent / JSON received a run |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, p := range []struct {
		what string
		ph   MLSPhase
	}{
		{fmt.Sprintf("claim a KeyPackage of each of %d people", r.Members), r.Claim},
		{fmt.Sprintf("commit adding %d clients, with Welcome and GroupInfo", r.Members), r.Commit},
		{fmt.Sprintf("fetch a week (%d commits) of %d groups, after the epoch joined", r.WeekCommits, r.Members), r.Fetch},
	} {
		fmt.Fprintf(&b, "| %s | %d | %.1f | %.1f | %.1f | %.0f | %.0f | %d / %d |\n", p.what, p.ph.Requests, p.ph.P50ms, p.ph.P95ms, p.ph.MaxMs,
			median(p.ph.WallMs), median(p.ph.CPUms), p.ph.SentB, p.ph.GotB)
	}
	return b.String()
}
