// Command bench seeds the fixtures of SPEC section 5 and measures a release
// build of nah against the thresholds in bench/THRESHOLDS.md, in one run on
// this machine: cold start, idle and peak memory, feed and post latency under
// concurrency, and the ceiling of a static net/http server under the same
// load. See bench/README.md for the exact commands.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/nah-app/nah/bench/fixture"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "seed":
		err = seedCmd(ctx, os.Args[2:])
	case "run":
		err = runCmd(ctx, os.Args[2:])
	case "seed-pocketbase":
		err = seedPocketBaseCmd(ctx, os.Args[2:])
	case "cold":
		err = coldCmd(ctx, os.Args[2:])
	case "hostile":
		err = hostileCmd(ctx, os.Args[2:])
	case "media":
		err = mediaCmd(ctx, os.Args[2:])
	case "restore":
		err = restoreCmd(ctx, os.Args[2:])
	case "soak":
		err = soakCmd(ctx, os.Args[2:])
	case "restart":
		err = restartCmd(ctx, os.Args[2:])
	case "restore-history":
		err = restoreHistoryCmd(ctx, os.Args[2:])
	case "footprint":
		err = footprintCmd(ctx, os.Args[2:])
	case "ceiling":
		err = ceilingCmd(os.Args[2:])
	case "mls":
		err = mlsCmd(ctx, os.Args[2:])
	case "digest":
		err = digestCmd(ctx, os.Args[2:])
	case "compare":
		err = compareCmd(os.Args[2:])
	case "baseline":
		err = baselineCmd(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  go run ./bench seed -fixture NAME -dir DIR     write a fixture (people-1k, people-1k-30, people-10k, people-small)
  go run ./bench run -fixture NAME -bin BINARY    measure; writes bench/results/NAME-TIME.json
      [-pocketbase PB_BINARY]                      then PocketBase the same way, side by side; writes bench/results/pocketbase-NAME-TIME.json
  go run ./bench seed-pocketbase -fixture NAME -bin PB_BINARY  only seed PocketBase's copy of the fixture into the cache
  go run ./bench hostile -fixture NAME -bin BINARY the hostile mix; writes bench/results/hostile-NAME-TIME.json
  go run ./bench media -fixture NAME -bin BINARY   media uploads and downloads; writes bench/results/media-NAME-TIME.json
  go run ./bench digest                            5,000 digests due in one minute; writes bench/results/digest-TIME.json
  go run ./bench mls -bin BINARY [-runs 5] [-week 7]  MLS delivery: 150 claims, a commit adding 150 clients, a week of commits of 150 groups fetched; writes bench/results/mls-TIME.json
  go run ./bench restore -fixture NAME -bin BINARY threshold 7: replicate the fixture, time nah restore; writes bench/results/restore-NAME-TIME.json
  go run ./bench soak -fixture NAME -bin BINARY [-for 30m] [-env NAH_RETENTION=5m]  minutes of steady posts and feeds, the disk sampled every 30 s; writes bench/results/soak-NAME-TIME.json
  go run ./bench restart -fixture NAME -bin A[,B] [-n 20]  what each person's first post after a clean restart ships; writes bench/results/restart-NAME-TIME.json
  go run ./bench footprint -fixture NAME -bin BINARY [-pocketbase PB]  seed through nah's API (once, cached as NAME-api), the data directory after a clean stop; writes bench/results/footprint-NAME-TIME.json
  go run ./bench restore-history -bin BINARY [-window 10s] [-windows 52]  restore time of one person by the length of their history (a week against a year, scaled by NAH_RETENTION); writes bench/results/restore-history-TIME.json
  go run ./bench cold -fixture NAME -bin A[,B] [-n 7] cold starts only, binaries alternated: median and range of each
  go run ./bench compare [-baseline FILE] [RESULT] print a result as ratios to the baseline
  go run ./bench baseline                          make bench/baseline.json from the newest result of each fixture
`)
	os.Exit(2)
}

func seedCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("seed", flag.ExitOnError)
	name := fs.String("fixture", "people-1k", "fixture name")
	dir := fs.String("dir", "", "directory to write the fixture into")
	fs.Parse(args)
	f, ok := fixture.Fixtures[*name]
	if !ok || *dir == "" {
		usage()
	}
	res, err := fixture.Generate(ctx, *dir, f, os.Stderr)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %d people, %d moments, %d connections in %v\n", f.Name, res.People, res.Moments, res.Connections, res.Took.Round(time.Millisecond))
	return nil
}

// fixtureDir returns the cached fixture, generating it on first use: seeding
// people-10k takes minutes, and every run copies from the cache.
func fixtureDir(ctx context.Context, cache string, f fixture.Fixture) (string, error) {
	dir := filepath.Join(cache, f.Name)
	if _, err := os.Stat(filepath.Join(dir, fixture.PeopleFile)); err == nil {
		return dir, nil
	}
	os.RemoveAll(dir)
	fmt.Fprintf(os.Stderr, "seeding %s into %s (once; later runs reuse it)\n", f.Name, dir)
	res, err := fixture.Generate(ctx, dir, f, os.Stderr)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "%s: %d people, %d moments, %d connections in %v\n", f.Name, res.People, res.Moments, res.Connections, res.Took.Round(time.Millisecond))
	return dir, nil
}

// seedPocketBaseCmd seeds PocketBase's copy of a fixture into the cache
// (what run -pocketbase does on first use), without measuring.
func seedPocketBaseCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("seed-pocketbase", flag.ExitOnError)
	name, bin, cache, _ := commonFlags(fs)
	fs.Parse(args)
	f, ok := fixture.Fixtures[*name]
	if !ok {
		usage()
	}
	dir, people, err := pbSeedDir(ctx, *bin, *cache, f)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %d people in %s\n", f.Name, len(people), dir)
	return nil
}
