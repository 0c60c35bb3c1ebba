package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nah-app/nah/store"
)

// TestPersonImportCommand: `nah person import` on a stopped data directory
// recreates an exported person and prints their one-time link and their
// former connections here; a taken handle says to use -handle, which works.
func TestPersonImportCommand(t *testing.T) {
	ctx := context.Background()
	old, err := store.Open(ctx, store.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var ids [2]string
	for i, h := range []string{"ann", "bob"} {
		p, err := old.CreatePerson(ctx, store.NewPerson{Handle: h, PasswordHash: "x"})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = p.ID
	}
	if err := old.ImportConnections(ctx, [][2]string{{ids[0], ids[1]}}, 1234); err != nil {
		t.Fatal(err)
	}
	if _, err := old.CreateMoment(ctx, ids[0], []byte("hello")); err != nil {
		t.Fatal(err)
	}
	e, err := old.ExportPerson(ctx, ids[0], "v-test")
	if err != nil {
		t.Fatal(err)
	}
	var tarball bytes.Buffer
	_, err = e.WriteTo(&tarball)
	e.Close()
	old.Close()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "ann.tar")
	if err := os.WriteFile(file, tarball.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	env := map[string]string{"NAH_DATA_DIR": dir, "NAH_ADDR": "127.0.0.1:8123", "NAH_REPLICA_URL": dir + ".replica"}
	getenv := func(k string) string { return env[k] }
	cmd := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(ctx, args, getenv, &out, &errOut)
		return out.String() + errOut.String(), err
	}
	s, err := store.Open(ctx, store.Config{Dir: dir}) // bob has an account here
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreatePerson(ctx, store.NewPerson{Handle: "bob", PasswordHash: "x"}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	out, err := cmd("person", "import", file)
	if err != nil {
		t.Fatal(err, out)
	}
	link := regexp.MustCompile(`http://127\.0\.0\.1:8123/reset/(\S+)`).FindStringSubmatch(out)
	if link == nil || !strings.Contains(out, "bob") || !strings.Contains(out, "restart") {
		t.Fatalf("output has no link, no bob or no word of a restart:\n%s", out)
	}
	if _, err := cmd("person", "import", file); err == nil || !strings.Contains(err.Error(), "-handle") {
		t.Fatalf("a second import: %v, want an error naming -handle", err)
	}
	if out, err := cmd("person", "import", "-handle", "ann.two", file); err != nil || !strings.Contains(out, "ann.two") {
		t.Fatalf("import -handle ann.two: %v\n%s", err, out)
	}
	if _, err := cmd("person", "import"); err == nil {
		t.Fatal("import without a file worked")
	}

	s, err = store.Open(ctx, store.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, _, err := s.FindPersonByHandle(ctx, "ann")
	if err != nil || p.ID == ids[0] {
		t.Fatalf("ann: %+v, %v", p, err)
	}
	if who, err := s.CheckLink(ctx, store.LinkReset, link[1]); err != nil || who != p.ID {
		t.Fatalf("link: %q, %v", who, err)
	}
	if n, err := s.MomentCount(ctx, p.ID); err != nil || n != 1 {
		t.Fatalf("%d moments, %v", n, err)
	}
}
