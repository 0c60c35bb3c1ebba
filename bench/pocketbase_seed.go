package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/nah-app/nah/bench/fixture"
)

// PocketBase's copy of a fixture: the same people, connections and
// moments as nah's, written through PocketBase's own API once and cached.

// pbSeedDir returns PocketBase's seed of fixture f, made on first use in
// cache/pocketbase-NAME-SCHEMA (pb_data and people.json, written last): the same
// people, connections and moments as nah's (fixture.Graph and
// fixture.Histories, the history ending at the seed's time), written
// through PocketBase's API with a superuser.
func pbSeedDir(ctx context.Context, bin, cache string, f fixture.Fixture) (string, []pbPerson, error) {
	dir := filepath.Join(cache, "pocketbase-"+f.Name+"-"+pbSchema)
	peopleFile := filepath.Join(dir, fixture.PeopleFile)
	if raw, err := os.ReadFile(peopleFile); err == nil {
		var people []pbPerson
		if err := json.Unmarshal(raw, &people); err != nil {
			return "", nil, err
		}
		// One start and stop on the seed itself: bench/pocketbase's serve
		// gives a seed made by an older build this build's rules and
		// indexes, so that no measured start pays for it.
		cmd, _, done, err := pbServe(ctx, bin, filepath.Join(dir, "pb_data"))
		if err != nil {
			return "", nil, err
		}
		return dir, people, pbStop(cmd, done)
	}
	os.RemoveAll(dir)
	data := filepath.Join(dir, "pb_data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return "", nil, err
	}
	fmt.Fprintf(os.Stderr, "seeding %s for PocketBase into %s (once; later runs reuse it)\n", f.Name, dir)
	t0 := time.Now()
	if out, err := exec.Command(bin, "superuser", "upsert", pbEmail, pbPassword, "--dir="+data).CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("superuser upsert: %v: %s", err, out)
	}
	cmd, base, done, err := pbServe(ctx, bin, data)
	if err != nil {
		return "", nil, err
	}
	defer cmd.Process.Kill()
	people, err := pbSeed(ctx, base, f)
	if err != nil {
		return "", nil, err
	}
	if err := pbStop(cmd, done); err != nil {
		return "", nil, err
	}
	b, _ := json.Marshal(people)
	if err := os.WriteFile(peopleFile, b, 0o600); err != nil {
		return "", nil, err
	}
	fmt.Fprintf(os.Stderr, "seeded %s for PocketBase in %.0f s\n", f.Name, time.Since(t0).Seconds())
	return dir, people, nil
}

// pbSeed writes fixture f into the PocketBase at base and returns its
// people with their tokens.
func pbSeed(ctx context.Context, base string, f fixture.Fixture) ([]pbPerson, error) {
	c := newClient(8)
	defer c.CloseIdleConnections()
	var su struct{ Token string }
	if err := pbCall(ctx, c, "POST", base+"/api/collections/_superusers/auth-with-password", "", map[string]string{"identity": pbEmail, "password": pbPassword}, &su); err != nil {
		return nil, err
	}
	// People one request each: a batch runs in one transaction, and 100
	// password hashes in one overran its time limit.
	err := parallel(ctx, f.People, 4, "people", func(i int) error {
		return pbCall(ctx, c, "POST", base+"/api/collections/users/records", su.Token, map[string]any{
			"id": pbID(i), "email": fmt.Sprintf("p%05d@bench.invalid", i), "emailVisibility": false, "verified": true,
			"password": fixture.Password, "passwordConfirm": fixture.Password, "name": fmt.Sprintf("p%05d", i),
		}, nil)
	})
	if err != nil {
		return nil, err
	}

	type item struct {
		Method string         `json:"method"`
		URL    string         `json:"url"`
		Body   map[string]any `json:"body"`
	}
	batch := func(items []item) error {
		return pbCall(ctx, c, "POST", base+"/api/batch", su.Token, map[string]any{"requests": items}, nil)
	}
	// Connections in both directions and everyone's own (a = b): the list
	// rule reads one row per moment (bench/pocketbase's FeedRule).
	var edges []item
	add := func(a, b int) {
		edges = append(edges, item{"POST", "/api/collections/connections/records", map[string]any{"a": pbID(a), "b": pbID(b)}})
	}
	for i := range f.People {
		add(i, i)
	}
	for _, e := range fixture.Graph(f) {
		add(int(e[0]), int(e[1]))
		add(int(e[1]), int(e[0]))
	}
	err = parallel(ctx, (len(edges)+pbBatch-1)/pbBatch, 2, "connections (batches)", func(k int) error {
		return batch(edges[k*pbBatch : min((k+1)*pbBatch, len(edges))])
	})
	if err != nil {
		return nil, err
	}

	// Moments person by person, in batches of at most pbBatch.
	history := fixture.Histories(f, time.Now().UnixMilli())
	var total atomic.Int64
	err = parallel(ctx, f.People, 2, "moments (people)", func(i int) error {
		ms := history(i)
		total.Add(int64(len(ms)))
		for len(ms) > 0 {
			n := min(len(ms), pbBatch)
			items := make([]item, n)
			for k, m := range ms[:n] {
				items[k] = item{"POST", pbPostPath, map[string]any{"author": pbID(i), "body": base64.StdEncoding.EncodeToString(m.Body), "created": pbDate(m.CreatedAt)}}
			}
			if err := batch(items); err != nil {
				return err
			}
			ms = ms[n:]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "  %d people, %d connection rows, %d moments\n", f.People, len(edges), total.Load())

	people := make([]pbPerson, f.People)
	err = parallel(ctx, f.People, 4, "tokens", func(i int) error {
		var r struct{ Token string }
		people[i].ID = pbID(i)
		err := pbCall(ctx, c, "POST", base+"/api/collections/users/impersonate/"+pbID(i), su.Token, map[string]any{"duration": pbTokenSeconds}, &r)
		people[i].Token = r.Token
		return err
	})
	return people, err
}
