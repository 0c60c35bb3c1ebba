package main

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nah-app/nah/bench/fixture"
)

// TestWeightedPick: the mixed post phase picks people in proportion to
// their rates, never one whose rate is zero; on people-1k's own rates the
// 5% who post five times a day make about 45% of the posts (5 x 0.05 over
// 0.2 x 0.80 + 1 x 0.15 + 5 x 0.05 = 0.56).
func TestWeightedPick(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := weighted([]float64{1, 0, 3, 0})
	counts := make([]int, 4)
	const n = 40000
	for range n {
		counts[pick(rng)]++
	}
	if counts[1] != 0 || counts[3] != 0 || math.Abs(float64(counts[2])/n-0.75) > 0.01 {
		t.Fatalf("weights 1, 0, 3, 0 picked %v of %d", counts, n)
	}
	if weighted([]float64{0, 0}) != nil {
		t.Fatal("a pick among people who never post")
	}

	_, perDay := fixture.PostingRates(fixture.Fixtures["people-1k"])
	pick = weighted(perDay)
	heavy := 0
	for range n {
		if perDay[pick(rng)] == 5 {
			heavy++
		}
	}
	if share := float64(heavy) / n; math.Abs(share-0.25/0.56) > 0.05 {
		t.Fatalf("people posting five times a day made %.2f of the posts, want about %.2f", share, 0.25/0.56)
	}
}
