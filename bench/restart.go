package main

import (
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/bench/fixture"
)

// RestartResult is what a clean restart costs the replica
// (bench/THRESHOLDS.md, "after a restart"): the LTX files each person's
// first post after the restart added, for each binary measured. Written to
// bench/results/restart-NAME-TIME.json.
type RestartResult struct {
	Fixture   string       `json:"fixture"`
	Time      time.Time    `json:"time"`
	Cores     int          `json:"cores"`
	GoVersion string       `json:"go_version"`
	People    int          `json:"people"`
	Runs      []RestartRun `json:"runs"`
}

// RestartRun is one binary's restart.
type RestartRun struct {
	Binary string `json:"binary"`
	// AtStart is what the second start shipped before any post.
	AtStartBytes int64 `json:"at_start_bytes"`
	AtStartFiles int   `json:"at_start_files"`
	// FirstPosts is the sum over People of what each first post added.
	FirstPostBytes int64           `json:"first_post_bytes"`
	FirstPostPages int             `json:"first_post_pages"`
	DBBytes        int64           `json:"db_bytes"` // the people's person.db, summed
	People         []RestartPerson `json:"per_person"`
}

// RestartPerson is what one person's first post after the restart added
// to the replica.
type RestartPerson struct {
	ID      string       `json:"id"`
	DBBytes int64        `json:"db_bytes"` // person.db without its WAL, after the post was replicated
	Bytes   int64        `json:"bytes"`
	Pages   int          `json:"pages"`
	Files   []RestartLTX `json:"files"`
}

// RestartLTX is one LTX file a first post added.
type RestartLTX struct {
	Path     string `json:"path"`
	Level    string `json:"level"`
	Bytes    int64  `json:"bytes"`
	Pages    int    `json:"pages"`
	Snapshot bool   `json:"snapshot"` // its header says it starts at the first transaction
	DBPages  uint32 `json:"db_pages"` // the database's size after it, in pages (the header's commit)
}

func restartCmd(ctx context.Context, args []string) error {
	fset := flag.NewFlagSet("restart", flag.ExitOnError)
	name, bin, cache, out := commonFlags(fset)
	n := fset.Int("n", 20, "people who post before and after the restart")
	fset.Parse(args)
	f, ok := fixture.Fixtures[*name]
	if !ok {
		usage()
	}
	res := RestartResult{Fixture: f.Name, Time: time.Now().UTC(), Cores: runtime.NumCPU(), GoVersion: runtime.Version(), People: *n}
	for _, b := range strings.Split(*bin, ",") {
		run, err := restartRun(ctx, *cache, f, b, *n)
		if err != nil {
			return fmt.Errorf("%s: %w", b, err)
		}
		res.Runs = append(res.Runs, run)
	}
	file, err := writeResult(*out, "restart-"+f.Name, res.Time, res)
	if err != nil {
		return err
	}
	fmt.Print(restartMarkdown(res))
	fmt.Printf("\nwritten to %s\n", file)
	return nil
}

// restartRun has n people post once (their files are then on the
// replica), stops the server cleanly, starts it again on the same data,
// has the same people post once more, and reads the LTX files that second
// post added under each person's file.
func restartRun(ctx context.Context, cache string, f fixture.Fixture, bin string, n int) (RestartRun, error) {
	run := RestartRun{Binary: bin}
	data, people, cleanup, err := copyFixture(ctx, cache, f)
	if err != nil {
		return run, err
	}
	defer cleanup()
	repl := filepath.Join(filepath.Dir(data), "replica")
	chosen := make([]fixture.Person, 0, n)
	for i := range min(n, len(people)) {
		chosen = append(chosen, people[i*len(people)/n]) // spread over the fixture's posting rates
	}
	var stopped map[string]ltxFile // the replica as the clean stop left it
	for round := range 2 {
		s, err := startServer(bin, data, repl, nil)
		if err != nil {
			return run, err
		}
		if round == 1 {
			if _, err := waitReplicated(ctx, s.metrics, time.Minute); err != nil {
				s.stop()
				return run, err
			}
		}
		before := scanLTX(repl)
		if round == 1 {
			for _, f := range before {
				run.AtStartBytes += f.Bytes
				run.AtStartFiles++
			}
			for rel, f := range stopped {
				if _, ok := before[rel]; ok {
					run.AtStartBytes -= f.Bytes
					run.AtStartFiles--
				}
			}
		}
		for _, p := range chosen {
			if err := postOnce(ctx, s.base, p); err != nil {
				s.stop()
				return run, err
			}
		}
		took, err := waitReplicated(ctx, s.metrics, 2*time.Minute)
		if err != nil {
			s.stop()
			return run, err
		}
		fmt.Fprintf(os.Stderr, "%s, start %d: %d posts replicated %.1f s after\n", bin, round+1, len(chosen), took.Seconds())
		if round == 1 {
			run.People = firstPosts(data, repl, before, chosen)
		}
		if err := s.stop(); err != nil {
			return run, fmt.Errorf("stop: %w", err)
		}
		if round == 0 {
			stopped = scanLTX(repl)
		}
	}
	for _, p := range run.People {
		run.FirstPostBytes += p.Bytes
		run.FirstPostPages += p.Pages
		run.DBBytes += p.DBBytes
	}
	return run, nil
}

// firstPosts is, for each person, the LTX files on the replica under
// their file that were not in before.
func firstPosts(data, repl string, before map[string]ltxFile, people []fixture.Person) []RestartPerson {
	after := scanLTX(repl)
	var out []RestartPerson
	for _, p := range people {
		db := nah.PersonRel(p.ID)
		rp := RestartPerson{ID: p.ID}
		if st, err := os.Stat(filepath.Join(data, db)); err == nil {
			rp.DBBytes = st.Size()
		}
		for rel, f := range after {
			if _, old := before[rel]; old || f.DB != db {
				continue
			}
			pages, h := ltxPages(filepath.Join(repl, rel))
			rp.Files = append(rp.Files, RestartLTX{Path: rel, Level: f.Level, Bytes: f.Bytes, Pages: pages, Snapshot: h.IsSnapshot(), DBPages: h.Commit})
			rp.Bytes += f.Bytes
			rp.Pages += pages
		}
		sort.Slice(rp.Files, func(i, j int) bool { return rp.Files[i].Path < rp.Files[j].Path })
		out = append(out, rp)
	}
	return out
}

// postOnce posts one moment of 400 bytes as p, the fixture's size.
func postOnce(ctx context.Context, base string, p fixture.Person) error {
	body := `{"body":"` + base64.StdEncoding.EncodeToString(make([]byte, 400)) + `"}`
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/api/v1/moments", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+p.Token)
	req.Header.Set("Content-Type", "application/json")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	if r.StatusCode != 201 {
		return fmt.Errorf("post as %s: %s", p.Handle, r.Status)
	}
	return nil
}

func restartMarkdown(r RestartResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### restart, %s, %s (%d cores, %s)\n\n", r.Fixture, r.Time.Format("2006-01-02 15:04 UTC"), r.Cores, r.GoVersion)
	fmt.Fprintf(&b, "%d people post, clean stop, start again, the same people post once more (400-byte moments): what each of those first posts added to the replica.\n\n", r.People)
	b.WriteString("| binary | shipped at start, before a post | first posts: LTX bytes | pages | their person.db, summed | bytes a person, median | max |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, run := range r.Runs {
		var each []int64
		for _, p := range run.People {
			each = append(each, p.Bytes)
		}
		sort.Slice(each, func(i, j int) bool { return each[i] < each[j] })
		med, top := int64(0), int64(0)
		if len(each) > 0 {
			med, top = each[len(each)/2], each[len(each)-1]
		}
		fmt.Fprintf(&b, "| `%s` | %d B in %d files | %d | %d | %d | %d | %d |\n", run.Binary, run.AtStartBytes, run.AtStartFiles, run.FirstPostBytes, run.FirstPostPages, run.DBBytes, med, top)
	}
	for _, run := range r.Runs {
		fmt.Fprintf(&b, "\n`%s`, per person:\n\n| person | person.db bytes | LTX bytes | pages | files (level: pages of the database's, snapshot) |\n| --- | --- | --- | --- | --- |\n", run.Binary)
		for _, p := range run.People {
			var files []string
			for _, f := range p.Files {
				s := fmt.Sprintf("L%s: %d of %d", f.Level, f.Pages, f.DBPages)
				if f.Snapshot {
					s += ", snapshot"
				}
				files = append(files, s)
			}
			fmt.Fprintf(&b, "| %s | %d | %d | %d | %s |\n", p.ID, p.DBBytes, p.Bytes, p.Pages, strings.Join(files, "; "))
		}
	}
	return b.String()
}
