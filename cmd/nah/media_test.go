package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestCrashDuringUploads: 8 phones upload media at once, in chunks, each
// 201 recorded with its sha256; the server is killed with SIGKILL with
// uploads in mid-stream. After a restart on the same directory no
// temporary file is left, every acknowledged media file is read back
// whole with its sha256, and each person's storage counter equals a walk
// of their media folder (no file without a row, no row without a file).
func TestCrashDuringUploads(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir)
	type phone struct{ id, token string }
	phones := make([]phone, 8)
	for i := range phones {
		phones[i].id, phones[i].token = p.signup(t, fmt.Sprintf("phone%d", i))
	}
	var (
		mu    sync.Mutex
		acked = map[int]map[string]string{} // phone -> media id -> sha256
		wg    sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i, ph := range phones {
		acked[i] = map[string]string{}
		wg.Go(func() {
			for ctx.Err() == nil {
				body := make([]byte, 512<<10)
				rand.Read(body)
				pr, pw := io.Pipe()
				go func() { // 64 KiB every 20 ms: about 160 ms an upload
					for off := 0; off < len(body); off += 64 << 10 {
						if _, err := pw.Write(body[off : off+64<<10]); err != nil {
							return
						}
						time.Sleep(20 * time.Millisecond)
					}
					pw.Close()
				}()
				req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+p.addr+"/api/v1/media", pr)
				req.Header.Set("Authorization", "Bearer "+ph.token)
				req.Header.Set("Content-Type", "image/jpeg")
				res, err := client.Do(req)
				pr.CloseWithError(io.ErrClosedPipe)
				if err != nil {
					return // the server is gone
				}
				var out struct{ ID, SHA256 string }
				json.NewDecoder(res.Body).Decode(&out)
				res.Body.Close()
				sum := sha256.Sum256(body)
				if res.StatusCode == 201 {
					if out.SHA256 != hex.EncodeToString(sum[:]) {
						t.Errorf("phone %d: sha256 %s of other bytes", i, out.SHA256)
					}
					mu.Lock()
					acked[i][out.ID] = out.SHA256
					mu.Unlock()
				}
			}
		})
	}
	time.Sleep(1500 * time.Millisecond)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	wg.Wait()
	cancel()
	temps, _ := filepath.Glob(filepath.Join(dir, "people", "*", "media", "upload-*"))
	t.Logf("after the kill: %d temporary files of uploads in flight", len(temps))

	p2 := start(t, dir)
	deadline := time.Now().Add(10 * time.Second)
	for {
		temps, _ = filepath.Glob(filepath.Join(dir, "people", "*", "media", "upload-*"))
		if len(temps) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(temps) > 0 {
		t.Errorf("temporary files survive the restart: %v", temps)
	}
	total := 0
	for i, ph := range phones {
		for id, sum := range acked[i] {
			req, _ := http.NewRequest("GET", "http://"+p2.addr+"/api/v1/people/"+ph.id+"/media/"+id, nil)
			req.Header.Set("Authorization", "Bearer "+ph.token)
			res, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			got := sha256.Sum256(b)
			if res.StatusCode != 200 || hex.EncodeToString(got[:]) != sum {
				t.Errorf("phone %d: acknowledged media %s: %d, %d bytes, sha256 %x", i, id, res.StatusCode, len(b), got)
			}
			total++
		}
		st, out, err := p2.call("GET", "/api/v1/me", ph.token, nil)
		if err != nil || st != 200 {
			t.Fatalf("me: %d %v", st, err)
		}
		var walked int64
		filepath.WalkDir(filepath.Join(dir, "people", ph.id, "media"), func(path string, e fs.DirEntry, err error) error {
			if err == nil && e.Type().IsRegular() && !strings.HasPrefix(e.Name(), "upload-") {
				info, _ := e.Info()
				walked += info.Size()
			}
			return nil
		})
		media := out["storage"].(map[string]any)["media"].(float64)
		if int64(media) != walked || int64(media) < int64(len(acked[i]))*512<<10 {
			t.Errorf("phone %d: counter says %v bytes of media, the folder holds %d, %d acknowledged", i, media, walked, len(acked[i]))
		}
	}
	if total < 8 {
		t.Fatalf("only %d uploads acknowledged before the kill; the test proved little", total)
	}
	t.Logf("%d acknowledged uploads from 8 phones, all whole after kill -9", total)
	p2.cmd.Process.Signal(syscall.SIGTERM)
	<-p2.done
}
