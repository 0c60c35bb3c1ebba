package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"syscall"
	"testing"
)

// post sends a JSON POST with an Idempotency-Key.
func (p *proc) postKeyed(t *testing.T, path, token, key string, body any) (int, http.Header, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", "http://"+p.addr+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var out map[string]any
	json.Unmarshal(raw, &out)
	return res.StatusCode, res.Header, out
}

// TestCrashRetrySeesWhatItWrote: a person posts their first moment with an
// Idempotency-Key and the server is killed (SIGKILL) right after the 201,
// before the directory hears of the post (its flush runs once a second).
// After the restart the moment is in the author's list and feed from the
// first request, and the retry with the same key answers the same moment
// without a second one.
func TestCrashRetrySeesWhatItWrote(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir)
	id, token := p.signup(t, "crasher")
	body := map[string]string{"body": base64.StdEncoding.EncodeToString([]byte("first words"))}
	st, _, first := p.postKeyed(t, "/api/v1/moments", token, "key-1", body)
	if st != 201 {
		t.Fatalf("post: %d %v", st, first)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done

	p2 := start(t, dir)
	if got := p2.ownMoments(t, id, token); !got[first["id"].(string)] || len(got) != 1 {
		t.Errorf("after kill -9 the author's list holds %v, want only %s", got, first["id"])
	}
	st, out, err := p2.call("GET", "/api/v1/feed", token, nil)
	if err != nil || st != 200 || len(out["moments"].([]any)) != 1 {
		t.Errorf("after kill -9 the feed: %d %v %v, want the one moment", st, out, err)
	}
	st, h, again := p2.postKeyed(t, "/api/v1/moments", token, "key-1", body)
	if st != 201 || again["id"] != first["id"] || again["created_at"] != first["created_at"] || h.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry after kill -9: %d %v %v, want the first answer %v replayed", st, h, again, first)
	}
	if got := p2.ownMoments(t, id, token); len(got) != 1 {
		t.Errorf("after the retry the author has %d moments, want 1", len(got))
	}
	p2.cmd.Process.Signal(syscall.SIGTERM)
	<-p2.done
}
