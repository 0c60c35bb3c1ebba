package backup_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/backup"
	"github.com/nah-app/nah/store"
)

// syncBuffer is a log the mirror writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) count(s string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Count(w.b.String(), s)
}

// TestMediaMirrorWaitsOutAFailingTarget: three people's photos wait while
// the target's media folder cannot be listed (a file stands where it
// goes); the first failure pauses the mirror for MaxWait rather than
// trying each person in turn, nobody's mark goes, and once the target is
// back every photo reaches it and every mark goes.
func TestMediaMirrorWaitsOutAFailingTarget(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	dir, repl := t.TempDir(), t.TempDir()
	tg, err := backup.ParseTarget(repl, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Init(ctx); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	marks := filepath.Join(dir, filepath.FromSlash(nah.MediaQueueRel))
	m := &backup.MediaMirror{
		Target: tg, DataDir: dir, Dir: marks, Quiet: 50 * time.Millisecond, MaxWait: time.Second,
		Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	s, err := store.Open(ctx, store.Config{Dir: dir, MediaAdded: m.Queue})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m.Source = s
	if err := os.WriteFile(filepath.Join(repl, "media"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	pics := map[string][]byte{}
	for i := range 3 {
		p, err := s.CreatePerson(ctx, store.NewPerson{Handle: fmt.Sprint("person", i), PasswordHash: "x"})
		if err != nil {
			t.Fatal(err)
		}
		up, err := s.StartUpload(ctx, p.ID, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		pic := []byte(fmt.Sprint("photo of ", i))
		up.Write(pic)
		md, err := up.Commit(ctx, "image/jpeg")
		if err != nil {
			t.Fatal(err)
		}
		pics[nah.MediaRel(p.ID, md.ID)] = pic
	}
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	time.Sleep(500 * time.Millisecond) // the quiet time ten times over, half the pause
	if n := logs.count(`"media mirrored"`); n != 1 {
		t.Errorf("%d mirrors tried within half a pause of a failing target, want 1\n%s", n, logs.b.String())
	}
	if n, _ := m.Waiting(); n != 3 {
		t.Errorf("%d people waiting while the target fails, want 3", n)
	}
	if es, _ := os.ReadDir(marks); len(es) != 3 {
		t.Errorf("%d marks while the target fails, want 3", len(es))
	}

	if err := os.Remove(filepath.Join(repl, "media")); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	onTarget := func() int {
		n := 0
		for rel, pic := range pics {
			if got, _ := os.ReadFile(filepath.Join(repl, "media", filepath.FromSlash(rel))); bytes.Equal(got, pic) {
				n++
			}
		}
		return n
	}
	// A person's mark goes just after their photo lands: both are waited for.
	marksLeft := func() int {
		es, _ := os.ReadDir(marks)
		return len(es)
	}
	for time.Since(back) < 5*time.Second && (onTarget() < len(pics) || marksLeft() > 0) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := onTarget(); n != len(pics) {
		t.Fatalf("%d of %d photos on the target %v after it came back", n, len(pics), time.Since(back).Round(time.Millisecond))
	}
	if n := marksLeft(); n != 0 {
		t.Errorf("%d marks left %v after the target came back, every photo mirrored", n, time.Since(back).Round(time.Millisecond))
	}
}
