package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/app"
	"github.com/nah-app/nah/bench/fixture"
	"github.com/nah-app/nah/store"
)

// Micro-benchmarks of the hot paths on a generated fixture: people-1k from
// the bench cache when it has been seeded (make bench), else people-small
// generated here. Run: go test -run '^$' -bench . -benchmem ./bench

// loadFixture copies the fixture into a directory of b's own.
func loadFixture(b *testing.B) (string, []fixture.Person) {
	b.Helper()
	home, _ := os.UserCacheDir()
	src := filepath.Join(home, "nah-bench", "people-1k")
	if _, err := os.Stat(filepath.Join(src, fixture.PeopleFile)); err != nil {
		src = filepath.Join(os.TempDir(), "nah-bench-people-small")
		if _, err := os.Stat(filepath.Join(src, fixture.PeopleFile)); err != nil {
			os.RemoveAll(src)
			if _, err := fixture.Generate(context.Background(), src, fixture.Fixtures["people-small"], nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	dir := filepath.Join(b.TempDir(), "data")
	if err := copyDir(filepath.Join(src, fixture.DataDir), dir); err != nil {
		b.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(src, fixture.PeopleFile))
	var people []fixture.Person
	if err := json.Unmarshal(raw, &people); err != nil {
		b.Fatal(err)
	}
	b.Logf("fixture %s, %d people", src, len(people))
	return dir, people
}

func openBench(b *testing.B, heads int64) (*store.Store, *app.App, []fixture.Person) {
	return openBenchSync(b, heads, store.SyncFull)
}

func openBenchSync(b *testing.B, heads int64, sync store.Sync) (*store.Store, *app.App, []fixture.Person) {
	dir, people := loadFixture(b)
	s, err := store.Open(context.Background(), store.Config{Dir: dir, MaxOpenFiles: 2000, HeadCacheBytes: heads, Sync: sync})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	cfg := app.Config{PasswordCost: 4} // moment bytes: app's default
	return s, app.New(cfg, s, slog.New(slog.DiscardHandler)), people
}

// serve runs one request through the real handler, in process.
func serve(b *testing.B, h http.Handler, method, path, token string, body string) {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code >= 300 {
		b.Fatalf("%s %s: %d %s", method, path, w.Code, w.Body)
	}
}

// BenchmarkFeedNewestPosterFirst is the server's feed, through the handler,
// with heads (the default) and without.
func BenchmarkFeedNewestPosterFirst(b *testing.B) {
	for _, c := range []struct {
		name  string
		heads int64
	}{{"heads", 0}, {"no-heads", -1}} {
		b.Run(c.name, func(b *testing.B) {
			_, a, people := openBench(b, c.heads)
			for i := range people { // warm: every file opened once
				serve(b, a, "GET", "/api/v1/feed", people[i].Token, "")
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				serve(b, a, "GET", "/api/v1/feed", people[i%len(people)].Token, "")
				i += 7
			}
		})
	}
}

// BenchmarkFeedEveryFile reads the newest 30 whole rows (id, time and
// body) of every file of the circle, the way a feed without newest poster
// first would. JSON is not written: this is the read. (The keys-first shape
// of the same read is the store's feed with heads off, measured through the
// handler by BenchmarkFeedNewestPosterFirst/no-heads.)
func BenchmarkFeedEveryFile(b *testing.B) {
	s, _, people := openBench(b, -1)
	ctx := context.Background()
	circles := make([][]string, len(people))
	for i, p := range people {
		cs, err := s.Connections(ctx, p.ID)
		if err != nil {
			b.Fatal(err)
		}
		circles[i] = append(circles[i], p.ID)
		for _, c := range cs {
			circles[i] = append(circles[i], c.ID)
		}
	}
	b.ReportAllocs()
	var ms []nah.Moment
	i := 0
	for b.Loop() {
		ms = ms[:0]
		for _, id := range circles[i%len(circles)] {
			var err error
			if ms, err = s.Moments(ctx, id, nil, 30, ms); err != nil {
				b.Fatal(err)
			}
		}
		slices.SortFunc(ms, func(x, y nah.Moment) int {
			return nah.CompareNewest(x.CreatedAt, x.ID, x.Author, y.CreatedAt, y.ID, y.Author)
		})
		i += 7
	}
}

// BenchmarkPost is one durable post (fsync included) through the handler.
func BenchmarkPost(b *testing.B) {
	_, a, people := openBench(b, 0)
	body := `{"body":"` + base64.StdEncoding.EncodeToString(make([]byte, 400)) + `"}`
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		serve(b, a, "POST", "/api/v1/moments", people[i%len(people)].Token, body)
		i++
	}
}

// BenchmarkPostCPU is the post path's CPU: 16 writers through the handler
// to people's already open files (every file warmed by one post first),
// as the bench's uniform phase has them; cpu-ns/op is the process's user
// and system time a post (getrusage), which an fsync's wait does not count.
func BenchmarkPostCPU(b *testing.B) {
	for _, c := range []struct {
		name string
		sync store.Sync
	}{{"full", store.SyncFull}, {"normal", store.SyncNormal}} {
		b.Run(c.name, func(b *testing.B) {
			_, a, people := openBenchSync(b, 0, c.sync)
			body := `{"body":"` + base64.StdEncoding.EncodeToString(make([]byte, 400)) + `"}`
			for i := range people {
				serve(b, a, "POST", "/api/v1/moments", people[i].Token, body)
			}
			b.SetParallelism(8) // 16 goroutines on 2 cores
			b.ReportAllocs()
			var n atomic.Int64
			before := cpuTime()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := int(n.Add(7919)) % len(people)
					serve(b, a, "POST", "/api/v1/moments", people[i].Token, body)
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-before)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the process's user and system CPU time so far, in ns.
func cpuTime() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkTokenCheck is the authentication every request pays: GET /me
// minus its own work is dominated by the token lookup.
func BenchmarkTokenCheck(b *testing.B) {
	s, _, people := openBench(b, 0)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := s.PersonForToken(ctx, people[i%len(people)].Token); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
