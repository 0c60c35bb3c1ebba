package app

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
)

// bruteForce reads every moment of every person in ids straight from their
// files with the plain uncached read, newest first: the oracle the feed
// must equal.
func bruteForce(t *testing.T, s *store.Store, ids []string) []pageItem {
	t.Helper()
	ctx := context.Background()
	var all []pageItem
	for _, id := range ids {
		ms, err := s.Moments(ctx, id, nil, 1<<30, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			all = append(all, pageItem{ID: m.ID, Author: id, CreatedAt: wireTime(m.CreatedAt), Body: base64.StdEncoding.EncodeToString(m.Body)})
		}
	}
	slices.SortFunc(all, func(a, b pageItem) int {
		if a.CreatedAt != b.CreatedAt {
			return -compare(a.CreatedAt, b.CreatedAt)
		}
		if a.ID != b.ID {
			return -compare(a.ID, b.ID)
		}
		return -compare(a.Author, b.Author)
	})
	return all
}

// wireTime is the oracle's own spelling of a time on the wire (SPEC
// section 4: UTC, exactly three digits of milliseconds), written apart from
// nah.FormatTime so that a change there cannot change both sides.
func wireTime(ms int64) string {
	t := time.UnixMilli(ms).UTC()
	return fmt.Sprintf("%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), ms%1000)
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// world is the test's own model of who is connected to whom, kept apart
// from the store's graph so that the oracle does not trust the code under
// test.
type world struct {
	people []account
	conns  map[[2]int]bool
}

func (w *world) connected(i, j int) bool { return w.conns[[2]int{min(i, j), max(i, j)}] }

func (w *world) circle(i int) []string {
	ids := []string{w.people[i].id}
	for j := range w.people {
		if j != i && w.connected(i, j) {
			ids = append(ids, w.people[j].id)
		}
	}
	return ids
}

func checkFeeds(t *testing.T, ts *testServer, w *world, rng *rand.Rand, label string) int {
	t.Helper()
	pages := 0
	for i, p := range w.people {
		limit := 1 + rng.IntN(8)
		got := ts.readAll(t, p.token, "/api/v1/feed", limit)
		want := bruteForce(t, ts.store, w.circle(i))
		assertSameList(t, fmt.Sprintf("%s: feed of %s, limit %d", label, p.handle, limit), got, want)
		pages += len(got)/limit + 1
		// One person's moments: self or a connection, else 404.
		j := rng.IntN(len(w.people))
		path := "/api/v1/people/" + w.people[j].id + "/moments"
		if i == j || w.connected(i, j) {
			got := ts.readAll(t, p.token, path, limit)
			assertSameList(t, fmt.Sprintf("%s: %s reads %s", label, p.handle, w.people[j].handle), got, bruteForce(t, ts.store, []string{w.people[j].id}))
		} else if r := ts.do(t, "GET", path, p.token, nil); r.status != 404 {
			t.Fatalf("%s: stranger's moments: %d", label, r.status)
		}
	}
	return pages
}

func assertSameList(t *testing.T, label string, got, want []pageItem) {
	t.Helper()
	seen := map[[2]string]bool{}
	for _, g := range got {
		if seen[[2]string{g.ID, g.Author}] {
			t.Fatalf("%s: %s by %s appears twice", label, g.ID, g.Author)
		}
		seen[[2]string{g.ID, g.Author}] = true
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d moments, want %d", label, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: item %d is %+v, want %+v", label, i, got[i], want[i])
		}
	}
}

// TestFeedOracle is the property test of the newest-poster-first feed:
// random graphs and posts (with many equal timestamps), every page of every
// feed followed to the end equals the brute-force read of every relevant
// file; again after deletes, disconnects and more posts.
func TestFeedOracle(t *testing.T) {
	rounds := 12
	if testing.Short() {
		rounds = 3
	}
	var totalPeople, totalMoments, totalItems int
	for round := range rounds {
		seed := uint64(1337 + round)
		rng := rand.New(rand.NewPCG(seed, seed))
		// Heads off, heads for everyone, and a budget that fits only some:
		// each path must equal the brute-force read.
		heads := []int64{-1, 64 << 20, 8 << 10}[round%3]
		ts := newTestServer(t, func(c *serverConfig) { c.HeadCacheBytes = heads })
		ctx := context.Background()
		n := 2 + rng.IntN(39) // up to 40 people
		density := rng.Float64()
		w := &world{conns: map[[2]int]bool{}}
		for i := range n {
			p, err := ts.store.CreatePerson(ctx, store.NewPerson{Handle: fmt.Sprintf("p%02d", i), PasswordHash: "x"})
			if err != nil {
				t.Fatal(err)
			}
			tok, err := ts.store.CreateSession(ctx, p.ID)
			if err != nil {
				t.Fatal(err)
			}
			w.people = append(w.people, account{id: p.ID, handle: p.Handle, token: tok})
		}
		for i := range n {
			for j := i + 1; j < n; j++ {
				if rng.Float64() < density {
					inv, err := ts.store.CreateInvite(ctx, w.people[i].id)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := ts.store.RedeemInvite(ctx, w.people[j].id, inv.Code); err != nil {
						t.Fatal(err)
					}
					w.conns[[2]int{i, j}] = true
				}
			}
		}
		var posted []struct {
			who int
			id  string
		}
		postSome := func(k int) {
			for range k {
				// Half the posts share the previous post's millisecond.
				if rng.IntN(2) == 0 {
					ts.clock.Advance(time.Duration(1+rng.IntN(5000)) * time.Millisecond)
				}
				who := rng.IntN(n)
				body := make([]byte, 1+rng.IntN(40))
				for i := range body {
					body[i] = byte(rng.IntN(256))
				}
				id := ts.post(t, w.people[who], body)
				posted = append(posted, struct {
					who int
					id  string
				}{who, id})
			}
		}
		postSome(rng.IntN(300))
		label := fmt.Sprintf("seed %d, heads %d, %d people, density %.2f", seed, heads, n, density)
		totalItems += checkFeeds(t, ts, w, rng, label)

		// Deletes through the API, by their authors.
		for _, k := range rng.Perm(len(posted))[:len(posted)/4] {
			p := posted[k]
			if r := ts.do(t, "DELETE", "/api/v1/moments/"+p.id, w.people[p.who].token, nil); r.status != 204 {
				t.Fatalf("delete: %d", r.status)
			}
		}
		// Disconnects through the API, by either side.
		for pair := range w.conns {
			if rng.IntN(3) == 0 {
				a, b := pair[0], pair[1]
				if rng.IntN(2) == 0 {
					a, b = b, a
				}
				if r := ts.do(t, "DELETE", "/api/v1/connections/"+w.people[b].id, w.people[a].token, nil); r.status != 204 {
					t.Fatalf("disconnect: %d", r.status)
				}
				delete(w.conns, pair)
			}
		}
		postSome(rng.IntN(60))
		totalItems += checkFeeds(t, ts, w, rng, label+", after deletes and disconnects")
		totalPeople += n
		totalMoments += len(posted)
	}
	t.Logf("%d rounds: %d people, %d moments posted, feeds and lists checked", rounds, totalPeople, totalMoments)
}

// TestCursorIsAPosition: posts arriving between two page requests neither
// repeat nor skip items of the pages after the cursor.
func TestCursorIsAPosition(t *testing.T) {
	ts := newTestServer(t)
	ann, bob := ts.signup(t, "ann"), ts.signup(t, "bob")
	ts.connect(t, ann, bob)
	for i := range 20 {
		ts.clock.Advance(time.Duration(i%2) * time.Millisecond)
		ts.post(t, []account{ann, bob}[i%2], []byte{byte(i)})
	}
	want := bruteForce(t, ts.store, []string{ann.id, bob.id})
	var got []pageItem
	next := ""
	for {
		path := "/api/v1/feed?limit=3"
		if next != "" {
			path += "&before=" + next
		}
		r := ts.do(t, "GET", path, ann.token, nil)
		for _, m := range r.json["moments"].([]any) {
			m := m.(map[string]any)
			got = append(got, pageItem{m["id"].(string), m["author"].(string), m["created_at"].(string), m["body"].(string)})
		}
		if r.json["next"] == nil {
			break
		}
		next = r.json["next"].(string)
		// New posts between pages, some in the very same millisecond.
		ts.post(t, bob, []byte("late"))
		ts.clock.Advance(time.Millisecond)
	}
	assertSameList(t, "paging while posting", got, want)
}

// TestCursorTiesAcrossAuthors: ann's export imported as a second person on
// the same server keeps every moment's id and time, so a third person
// connected to both sees pairs of moments at the same (time, id). Paging
// with limit 1 to 3, and refreshing with after= from every position, shows
// each moment exactly once, newest first. (Issue 23, item 10: before the
// author broke ties, limit=1 showed 3 of 6.) With heads, and without: the
// files' queries break ties too.
func TestCursorTiesAcrossAuthors(t *testing.T) {
	for _, heads := range []int64{0, -1} {
		t.Run(fmt.Sprintf("heads=%d", heads), func(t *testing.T) { testCursorTies(t, heads) })
	}
}

func testCursorTies(t *testing.T, heads int64) {
	ts := newTestServer(t, func(c *serverConfig) { c.HeadCacheBytes = heads })
	ctx := context.Background()
	ann, cyd, dan := ts.signup(t, "ann"), ts.signup(t, "cyd"), ts.signup(t, "dan")
	for i := range 7 {
		// Pairs of ann's posts share a millisecond; cyd posts in the same
		// milliseconds, with other ids.
		if i%2 == 0 {
			ts.clock.Advance(time.Millisecond)
		}
		ts.post(t, ann, []byte{'a', byte(i)})
		if i%3 == 0 {
			ts.post(t, cyd, []byte{'c', byte(i)})
		}
	}
	res, err := ts.Client().Do(exportRequest(t, ts, "GET", ann.token))
	if err != nil {
		t.Fatal(err)
	}
	tarball, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("export: %d %v", res.StatusCode, err)
	}
	if p := postImport(t, signedInAdmin(t, ts), ts, "ann.two", tarball); p.status != 201 {
		t.Fatalf("import as ann.two: %d\n%s", p.status, p.body)
	}
	two, _, err := ts.store.FindPersonByHandle(ctx, "ann.two")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ts.store.CreateSession(ctx, two.ID)
	if err != nil {
		t.Fatal(err)
	}
	annTwo := account{id: two.ID, handle: "ann.two", token: tok}
	for _, p := range []account{ann, annTwo, cyd} {
		ts.connect(t, dan, p)
	}
	ts.clock.Advance(time.Second) // every moment settled: refresh cursors on every page
	want := bruteForce(t, ts.store, []string{dan.id, ann.id, annTwo.id, cyd.id})
	ties := 0
	for i := 1; i < len(want); i++ {
		if want[i].ID == want[i-1].ID {
			ties++
		}
	}
	if len(want) != 17 || ties != 7 {
		t.Fatalf("%d moments, %d ties: want 17 and 7", len(want), ties)
	}
	for limit := 1; limit <= 3; limit++ {
		label := fmt.Sprintf("dan's feed, limit %d", limit)
		assertSameList(t, label, ts.readAll(t, dan.token, "/api/v1/feed", limit), want)
		// A refresh from each moment's position: exactly the moments before it.
		for i, cur := range ts.positions(t, dan.token, "/api/v1/feed", len(want)) {
			assertSameList(t, fmt.Sprintf("%s, after= moment %d", label, i), ts.pagedAfter(t, dan.token, "/api/v1/feed", cur, limit), want[:i])
		}
	}
	// A cursor of an earlier version (48 characters, no author) still
	// works, as it did: both moments at its (time, id) are on neither side.
	for i, m := range want {
		at, err := time.Parse(nah.TimeFormat, m.CreatedAt)
		if err != nil {
			t.Fatal(err)
		}
		old := nah.EncodeCursor(ts.store.CursorKey(), nah.Cursor{At: at.UnixMilli(), ID: m.ID})
		if len(old) != 48 {
			t.Fatalf("an authorless cursor is %d characters", len(old))
		}
		var older, newer []pageItem
		for _, w := range want {
			if c := compare(w.CreatedAt+w.ID, m.CreatedAt+m.ID); c < 0 {
				older = append(older, w)
			} else if c > 0 {
				newer = append(newer, w)
			}
		}
		r := ts.do(t, "GET", "/api/v1/feed?limit=100&before="+old, dan.token, nil)
		var got []pageItem
		for _, x := range r.json["moments"].([]any) {
			x := x.(map[string]any)
			got = append(got, pageItem{x["id"].(string), x["author"].(string), x["created_at"].(string), x["body"].(string)})
		}
		assertSameList(t, fmt.Sprintf("before= an old cursor at moment %d", i), got, older)
		assertSameList(t, fmt.Sprintf("after= an old cursor at moment %d", i), ts.pagedAfter(t, dan.token, "/api/v1/feed", old, 2), newer)
	}
}

// positions returns the refresh cursor of each moment of a list, newest
// first: the first page's refresh, then the refresh of the page after each
// moment's predecessor (a page's refresh is its newest settled moment).
func (ts *testServer) positions(t *testing.T, token, path string, n int) []string {
	t.Helper()
	var out []string
	next := ""
	for range n {
		u := path + "?limit=1"
		if next != "" {
			u += "&before=" + next
		}
		r := ts.do(t, "GET", u, token, nil)
		refresh, _ := r.json["refresh"].(string)
		if r.status != 200 || refresh == "" {
			t.Fatalf("GET %s: %d, refresh %q", u, r.status, refresh)
		}
		out = append(out, refresh)
		next, _ = r.json["next"].(string)
	}
	return out
}

// pagedAfter reads every moment newer than after, the gap paged with
// before= as the document says.
func (ts *testServer) pagedAfter(t *testing.T, token, path, after string, limit int) []pageItem {
	t.Helper()
	var got []pageItem
	next := ""
	for range 1000 {
		u := fmt.Sprintf("%s?limit=%d&after=%s", path, limit, after)
		if next != "" {
			u += "&before=" + next
		}
		r := ts.do(t, "GET", u, token, nil)
		if r.status != 200 {
			t.Fatalf("GET %s: %d %s", u, r.status, r.raw)
		}
		for _, m := range r.json["moments"].([]any) {
			m := m.(map[string]any)
			got = append(got, pageItem{m["id"].(string), m["author"].(string), m["created_at"].(string), m["body"].(string)})
		}
		if next, _ = r.json["next"].(string); next == "" {
			return got
		}
	}
	t.Fatal("the refresh does not end")
	return nil
}

func TestTamperedCursorIs400(t *testing.T) {
	ts := newTestServer(t)
	ann := ts.signup(t, "ann")
	for range 3 {
		ts.post(t, ann, []byte("x"))
		ts.clock.Advance(time.Millisecond)
	}
	r := ts.do(t, "GET", "/api/v1/feed?limit=1", ann.token, nil)
	cur := r.json["next"].(string)
	b := []byte(cur)
	for i := range b {
		tampered := slices.Clone(b)
		tampered[i] ^= 1
		r := ts.do(t, "GET", "/api/v1/feed?before="+string(tampered), ann.token, nil)
		if r.status != 400 || r.errCode() != "invalid_cursor" {
			t.Fatalf("cursor with byte %d flipped: %d %s", i, r.status, r.raw)
		}
	}
	if r := ts.do(t, "GET", "/api/v1/feed?before="+cur, ann.token, nil); r.status != 200 {
		t.Fatalf("untampered: %d", r.status)
	}
}

// TestRollingDeploy: a post taken by a second store instance on the same data
// directory (a second process during a rolling deploy) is not in this
// instance's feeds while its newest-moment time is trusted, and is once the
// clock passes 30 s and the time is re-read from the file.
func TestRollingDeploy(t *testing.T) {
	ts := newTestServer(t)
	ann, bob := ts.signup(t, "ann"), ts.signup(t, "bob")
	ts.connect(t, ann, bob)
	ts.post(t, ann, []byte("ann"))
	ts.clock.Advance(time.Millisecond) // bob's post is the newer, not a tie that random ids break
	first := ts.post(t, bob, []byte("bob"))
	ts.clock.Advance(time.Second)
	// The reader's feed caches both heads before the other instance writes:
	// a head that were never reloaded would hide the other post forever.
	if got := ts.readAll(t, ann.token, "/api/v1/feed", 30); len(got) != 2 || got[0].ID != first {
		t.Fatalf("feed before the other instance writes: %+v", got)
	}

	other, err := store.Open(context.Background(), store.Config{Dir: ts.dir, Now: ts.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	m, err := other.CreateMoment(context.Background(), bob.id, []byte("from the other instance"))
	if err != nil {
		t.Fatal(err)
	}
	has := func() bool {
		for _, it := range ts.readAll(t, ann.token, "/api/v1/feed", 30) {
			if it.ID == m.ID {
				return true
			}
		}
		return false
	}
	ts.clock.Advance(29 * time.Second)
	if has() {
		t.Fatal("the post showed before bob's newest time was re-read: the test did not test the re-read")
	}
	ts.clock.Advance(2 * time.Second)
	if !has() {
		t.Fatal("31 s after, the other instance's post is still missing from the feed")
	}
}

// TestFeedReadsFewFiles: with 150 connections who all posted, a page of 30
// looks into at most 31 files, with heads cached or not.
func TestFeedReadsFewFiles(t *testing.T) {
	for _, heads := range []int64{-1, 64 << 20} {
		t.Run(fmt.Sprintf("heads %d", heads), func(t *testing.T) { testFeedReadsFewFiles(t, heads) })
	}
}

func testFeedReadsFewFiles(t *testing.T, heads int64) {
	ts := newTestServer(t, func(c *serverConfig) { c.MaxOpenFiles = 1000; c.HeadCacheBytes = heads })
	ctx := context.Background()
	me, err := ts.store.CreatePerson(ctx, store.NewPerson{Handle: "reader", PasswordHash: "x"})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ts.store.CreateSession(ctx, me.ID)
	if err != nil {
		t.Fatal(err)
	}
	for i := range nah.MaxConnections {
		p, err := ts.store.CreatePerson(ctx, store.NewPerson{Handle: fmt.Sprintf("p%03d", i), PasswordHash: "x"})
		if err != nil {
			t.Fatal(err)
		}
		inv, err := ts.store.CreateInvite(ctx, me.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ts.store.RedeemInvite(ctx, p.ID, inv.Code); err != nil {
			t.Fatal(err)
		}
		ts.clock.Advance(time.Millisecond)
		if _, err := ts.store.CreateMoment(ctx, p.ID, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	before := ts.store.Stats().FileReads
	r := ts.do(t, "GET", "/api/v1/feed", tok, nil)
	if r.status != 200 || len(r.json["moments"].([]any)) != 30 {
		t.Fatalf("feed: %d", r.status)
	}
	if n := ts.store.Stats().FileReads - before; n > 31 {
		t.Fatalf("a page of 30 looked into %d files, at most 31 allowed", n)
	}
}

// TestPageEndingAtLimit: SPEC section 4 says next is null exactly when
// nothing is left, so a list that ends exactly at a page's end has next
// null on that page, not on an empty page after it.
func TestPageEndingAtLimit(t *testing.T) {
	for _, heads := range []int64{-1, 64 << 20} {
		t.Run(fmt.Sprintf("heads %d", heads), func(t *testing.T) {
			ts := newTestServer(t, func(c *serverConfig) { c.HeadCacheBytes = heads })
			ann, bob := ts.signup(t, "ann"), ts.signup(t, "bob")
			ts.connect(t, ann, bob)
			for i := range 6 {
				ts.clock.Advance(time.Millisecond)
				ts.post(t, []account{ann, bob}[i%2], []byte{byte(i)})
			}
			for _, path := range []string{"/api/v1/feed", "/api/v1/people/" + ann.id + "/moments"} {
				total := 6
				if path != "/api/v1/feed" {
					total = 3
				}
				r := ts.do(t, "GET", fmt.Sprintf("%s?limit=%d", path, total), ann.token, nil)
				if n := len(r.json["moments"].([]any)); r.status != 200 || n != total || r.json["next"] != nil {
					t.Fatalf("%s, limit %d: %d, %d moments, next %v; want all %d and next null", path, total, r.status, n, r.json["next"], total)
				}
				// Two pages of half: the first has a next, the second ends exactly.
				r = ts.do(t, "GET", fmt.Sprintf("%s?limit=%d", path, total/2+total%2), ann.token, nil)
				next, _ := r.json["next"].(string)
				if next == "" {
					t.Fatalf("%s: the first of two pages has no next", path)
				}
				r = ts.do(t, "GET", fmt.Sprintf("%s?limit=%d&before=%s", path, total/2+total%2, next), ann.token, nil)
				if n := len(r.json["moments"].([]any)); n != total/2 || r.json["next"] != nil {
					t.Fatalf("%s: the last page holds %d, next %v; want %d and null", path, n, r.json["next"], total/2)
				}
			}
		})
	}
}
