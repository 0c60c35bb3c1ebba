package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nah-app/nah/bench/fixture"
)

// The footprint (bench/THRESHOLDS.md, "The replica over time"): a fixture
// seeded through nah's own API, as a family's phones would have written it
// (one request a sign-up, an invite, an acceptance and a moment), on a
// server replicating to a directory, then stopped cleanly. The seed is kept
// in cache/NAME-api (data, replica, people.json) and is what run -seed api
// starts on: a server restarted on its own data and replica, as an
// operator's is.

// Footprint is the result of bench footprint: sizes after the clean stop.
type Footprint struct {
	Fixture   string    `json:"fixture"`
	Time      time.Time `json:"time"`
	Cores     int       `json:"cores"`
	GoVersion string    `json:"go_version"`
	People    int       `json:"people"`
	Moments   int64     `json:"moments"`
	SeedS     float64   `json:"seed_s,omitempty"` // 0 when the seed came from the cache

	DataMB    float64 `json:"data_mb"` // the whole data directory
	Databases DirUse  `json:"databases"`
	WALs      DirUse  `json:"wals"`
	State     DirUse  `json:"replication_state"`
	ReplicaMB float64 `json:"replica_mb"`

	PocketBaseMB float64 `json:"pocketbase_data_mb,omitempty"` // its pb_data, seeded through its API
	RatioToPB    float64 `json:"data_ratio_to_pocketbase,omitempty"`
}

func footprintCmd(ctx context.Context, args []string) error {
	fset := flag.NewFlagSet("footprint", flag.ExitOnError)
	name, bin, cache, out := commonFlags(fset)
	pocketbase := fset.String("pocketbase", "", "also report the data directory of this PocketBase's seed of the same fixture (seeded through its API on first use)")
	fset.Parse(args)
	f, ok := fixture.Fixtures[*name]
	if !ok {
		usage()
	}
	res := Footprint{Fixture: f.Name, Time: time.Now().UTC(), Cores: runtime.NumCPU(), GoVersion: runtime.Version()}
	dir, people, seeded, err := apiSeedDir(ctx, *bin, *cache, f)
	if err != nil {
		return err
	}
	res.People, res.SeedS = len(people.People), seeded.Seconds()
	res.Moments = people.Moments
	data := filepath.Join(dir, fixture.DataDir)
	res.DataMB = mb(dirSize(data))
	res.Databases, res.WALs, res.State = dataUse(data)
	res.ReplicaMB = mb(dirSize(filepath.Join(dir, "replica")))
	if *pocketbase != "" {
		pdir, _, err := pbSeedDir(ctx, *pocketbase, *cache, f)
		if err != nil {
			return err
		}
		res.PocketBaseMB = mb(dirSize(filepath.Join(pdir, "pb_data")))
		res.RatioToPB = res.DataMB / res.PocketBaseMB
	}
	file, err := writeResult(*out, "footprint-"+f.Name, res.Time, res)
	if err != nil {
		return err
	}
	fmt.Print(footprintMarkdown(res))
	fmt.Printf("\nwritten to %s\n", file)
	return nil
}

func footprintMarkdown(r Footprint) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s seeded through the API (%d people, %d moments), after a clean stop:\n\n", r.Fixture, r.People, r.Moments)
	b.WriteString("| | MB | files |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| nah's data directory | %.1f | |\n", r.DataMB)
	for _, u := range []struct {
		what string
		use  DirUse
	}{{"databases (*.db)", r.Databases}, {"WALs", r.WALs}, {"replication's local state", r.State}} {
		fmt.Fprintf(&b, "| - %s | %.1f | %d |\n", u.what, mb(u.use.Bytes), u.use.Files)
	}
	fmt.Fprintf(&b, "| nah's replica (beside it) | %.1f | |\n", r.ReplicaMB)
	if r.PocketBaseMB > 0 {
		fmt.Fprintf(&b, "| PocketBase's pb_data | %.1f | |\n\nnah's data directory is %.2f× PocketBase's.\n", r.PocketBaseMB, r.RatioToPB)
	}
	return b.String()
}

// apiSeed is people.json of an API seed.
type apiSeed struct {
	People  []fixture.Person `json:"people"`
	Moments int64            `json:"moments"`
}

// apiSeedDir returns nah's API seed of fixture f, made on first use with
// bin in cache/NAME-api, and how long the seeding took (0 from the cache).
func apiSeedDir(ctx context.Context, bin, cache string, f fixture.Fixture) (string, apiSeed, time.Duration, error) {
	dir := filepath.Join(cache, f.Name+"-api")
	peopleFile := filepath.Join(dir, fixture.PeopleFile)
	var seed apiSeed
	if raw, err := os.ReadFile(peopleFile); err == nil {
		return dir, seed, 0, json.Unmarshal(raw, &seed)
	}
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", seed, 0, err
	}
	fmt.Fprintf(os.Stderr, "seeding %s through nah's API into %s (once; later runs reuse it)\n", f.Name, dir)
	t0 := time.Now()
	port, err := freePort()
	if err != nil {
		return "", seed, 0, err
	}
	base := "http://" + port
	cmd := exec.Command(bin, "serve")
	cmd.Env = []string{"NAH_ADDR=" + port, "NAH_DATA_DIR=" + filepath.Join(dir, fixture.DataDir),
		"NAH_REPLICA_URL=" + filepath.Join(dir, "replica"), "NAH_LOG_LEVEL=warn",
		"NAH_OPEN_SIGNUP=true", "NAH_SIGNUP_PER_HOUR=0"}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", seed, 0, err
	}
	defer cmd.Process.Kill()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	c := newClient(16)
	defer c.CloseIdleConnections()
	for t := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if r, err := c.Get(base + "/healthz"); err == nil {
			r.Body.Close()
			break
		}
		if time.Since(t) > 30*time.Second {
			return "", seed, 0, fmt.Errorf("%s did not start", bin)
		}
	}
	if seed, err = apiSeedFixture(ctx, c, base, f); err != nil {
		return "", seed, 0, err
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			return "", seed, 0, fmt.Errorf("stop: %w", err)
		}
	case <-time.After(stopLimit):
		return "", seed, 0, fmt.Errorf("no exit %v after SIGTERM", stopLimit)
	}
	b, _ := json.Marshal(seed)
	if err := os.WriteFile(peopleFile, b, 0o600); err != nil {
		return "", seed, 0, err
	}
	took := time.Since(t0)
	fmt.Fprintf(os.Stderr, "seeded %s through nah's API in %.0f s\n", f.Name, took.Seconds())
	return dir, seed, took, nil
}

// apiSeedFixture writes fixture f into the nah at base through its API:
// person i of f signs up as p%05d, each of f's connections is an invite
// and its acceptance, and each person's moments are posted in order.
func apiSeedFixture(ctx context.Context, c *http.Client, base string, f fixture.Fixture) (apiSeed, error) {
	seed := apiSeed{People: make([]fixture.Person, f.People)}
	err := parallel(ctx, f.People, 4, "sign-ups", func(i int) error {
		var r struct {
			Person struct {
				ID string `json:"id"`
			} `json:"person"`
			Token string `json:"token"`
		}
		h := fmt.Sprintf("p%05d", i)
		if err := nahCall(ctx, c, "POST", base+"/api/v1/accounts", "", map[string]string{"handle": h, "password": fixture.Password}, 201, &r); err != nil {
			return err
		}
		seed.People[i] = fixture.Person{ID: r.Person.ID, Handle: h, Token: r.Token}
		return nil
	})
	if err != nil {
		return seed, err
	}
	edges := fixture.Graph(f)
	err = parallel(ctx, len(edges), 8, "connections", func(k int) error {
		a, b := seed.People[edges[k][0]], seed.People[edges[k][1]]
		var inv struct {
			Code string `json:"code"`
		}
		if err := nahCall(ctx, c, "POST", base+"/api/v1/invites", a.Token, nil, 201, &inv); err != nil {
			return err
		}
		return nahCall(ctx, c, "POST", base+"/api/v1/connections", b.Token, map[string]string{"code": inv.Code}, 201, nil)
	})
	if err != nil {
		return seed, err
	}
	history := fixture.Histories(f, time.Now().UnixMilli())
	var total atomic.Int64
	err = parallel(ctx, f.People, 16, "moments (people)", func(i int) error {
		for _, m := range history(i) {
			body := map[string]string{"body": base64.StdEncoding.EncodeToString(m.Body)}
			if err := nahCall(ctx, c, "POST", base+"/api/v1/moments", seed.People[i].Token, body, 201, nil); err != nil {
				return err
			}
			total.Add(1)
		}
		return nil
	})
	seed.Moments = total.Load()
	fmt.Fprintf(os.Stderr, "  %d people, %d connections, %d moments\n", f.People, len(edges), seed.Moments)
	return seed, err
}

// nahCall is jsonCall with a bearer token (none when empty).
func nahCall(ctx context.Context, c *http.Client, method, url, token string, in any, want int, out any) error {
	if token != "" {
		token = "Bearer " + token
	}
	return jsonCall(ctx, c, method, url, token, in, want, out)
}

// copyAPISeed copies nah's API seed of f (made on first use) into a fresh
// directory: data and its replica beside it as data.replica, where measure
// points the server.
func copyAPISeed(ctx context.Context, bin, cache string, f fixture.Fixture) (data string, people []fixture.Person, cleanup func(), err error) {
	src, seed, _, err := apiSeedDir(ctx, bin, cache, f)
	if err != nil {
		return "", nil, nil, err
	}
	work, err := os.MkdirTemp("", "nah-bench-run")
	if err != nil {
		return "", nil, nil, err
	}
	cleanup = func() { removeCopy(cache, work) }
	data = filepath.Join(work, "data")
	fmt.Fprintf(os.Stderr, "copying %s's API seed and its replica\n", f.Name)
	if err := copyDir(filepath.Join(src, fixture.DataDir), data); err != nil {
		cleanup()
		return "", nil, nil, err
	}
	if err := copyDir(filepath.Join(src, "replica"), data+".replica"); err != nil {
		cleanup()
		return "", nil, nil, err
	}
	syscall.Sync()
	return data, seed.People, cleanup, nil
}
