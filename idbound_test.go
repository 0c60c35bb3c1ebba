package nah

import (
	"bytes"
	"math/rand"
	"testing"
)

// TestIDBound: for moments whose times are their ids', the id bound says
// older-or-not exactly as CompareNewest does, for bounds of every kind:
// a moment's own (at, id), an id of another time, the horizon's empty id
// and its all-zero spelling, times at the edges.
func TestIDBound(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	base := int64(1_780_000_000_000)
	var ms []Moment
	for i := 0; i < 400; i++ {
		at := base + int64(rng.Intn(50)) // many moments share a millisecond
		ms = append(ms, Moment{ID: MomentIDFrom(at, rng), CreatedAt: at})
	}
	ms = append(ms, Moment{ID: MomentIDFrom(base+7, bytes.NewReader(make([]byte, 10))), CreatedAt: base + 7}) // an id at its time's floor
	type bound struct {
		at int64
		id string
	}
	bounds := []bound{{base + 7, ""}, {base + 7, "00000000000000000000000000"}, {0, ""}, {-5, ""}, {1 << 62, ""}, {1<<63 - 1, "zz"}, {base - 1, ms[0].ID}, {base + 6, ms[len(ms)-1].ID}}
	for i := 0; i < 300; i++ {
		m := ms[rng.Intn(len(ms))]
		bounds = append(bounds, bound{m.CreatedAt, m.ID}, bound{m.CreatedAt + int64(rng.Intn(5)) - 2, m.ID}, bound{base + int64(rng.Intn(52)) - 1, ""})
	}
	for _, b := range bounds {
		for _, orEqual := range []bool{false, true} {
			id, eq := IDBound(b.at, b.id, orEqual)
			for _, m := range ms {
				c := CompareNewest(m.CreatedAt, m.ID, "", b.at, b.id, "")
				want := c > 0 || orEqual && c == 0
				got := m.ID < id || eq && m.ID == id
				if got != want {
					t.Fatalf("bound (%d, %q) orEqual %v: moment (%d, %s) older %v by the ids (%q, eq %v), %v by time", b.at, b.id, orEqual, m.CreatedAt, m.ID, got, id, eq, want)
				}
			}
		}
	}
	for _, m := range ms {
		if at, ok := MomentTime(m.ID); !ok || at != m.CreatedAt {
			t.Fatalf("MomentTime(%s) = %d, %v; want %d", m.ID, at, ok, m.CreatedAt)
		}
	}
	if _, ok := MomentTime("not an id"); ok {
		t.Fatal("MomentTime took a string that is no id")
	}
}
