package main

import (
	"crypto/sha256"
	bin "encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// genReader is a file of n pseudo-random bytes made on the fly from seed,
// read from off: block k of 32 KiB is ChaCha8 seeded by (seed, k), so any
// offset is cheap and the test holds no file in memory.
type genReader struct {
	seed   uint64
	off, n int64
	fail   int64 // when > 0, the read that reaches this offset fails instead
	block  [32 << 10]byte
	have   int64 // block index in block, -1 none
}

var errCut = errors.New("the phone lost its network")

func newGen(seed uint64, off, n int64) *genReader {
	return &genReader{seed: seed, off: off, n: n, have: -1}
}

func (g *genReader) Read(p []byte) (int, error) {
	if g.off >= g.n {
		return 0, io.EOF
	}
	if g.fail > 0 && g.off >= g.fail {
		return 0, errCut
	}
	k := g.off / int64(len(g.block))
	if g.have != k {
		var s [32]byte
		bin.LittleEndian.PutUint64(s[:], g.seed)
		bin.LittleEndian.PutUint64(s[8:], uint64(k))
		rand.NewChaCha8(s).Read(g.block[:])
		g.have = k
	}
	in := g.off % int64(len(g.block))
	n := copy(p, g.block[in:min(int64(len(g.block)), in+g.n-g.off)])
	g.off += int64(n)
	return n, nil
}

// TestResumableUploadsMemory: 20 phones each upload 200 MiB through
// /api/v1/uploads at once to the real binary, each cut off once mid-piece
// and resumed from HEAD's offset; every file ends with the source's sha256,
// and the server's peak resident memory (VmHWM) stays under 200 MiB, far
// under the 4 GiB that went through it: pieces stream to disk.
func TestResumableUploadsMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("4 GiB of uploads: not in -short")
	}
	const phones, size = 20, 200 << 20
	p := start(t, t.TempDir(), "NAH_MAX_MEDIA_BYTES=256MiB")
	tokens := make([]string, phones)
	ids := make([]string, phones)
	for i := range tokens {
		ids[i], tokens[i] = p.signup(t, fmt.Sprintf("phone%d", i))
	}
	c := &http.Client{Timeout: 5 * time.Minute}
	base := "http://" + p.addr
	tus := func(method, path, token string, body io.Reader, hdr ...string) (*http.Response, error) {
		req, _ := http.NewRequest(method, base+path, body)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Tus-Resumable", "1.0.0")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := c.Do(req)
		if err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		return res, err
	}
	var wg sync.WaitGroup
	errs := make(chan error, phones)
	began := time.Now()
	for i := range phones {
		wg.Go(func() {
			errs <- func() error {
				seed := uint64(i + 1)
				res, err := tus("POST", "/api/v1/uploads", tokens[i], nil, "Upload-Length", strconv.Itoa(size))
				if err != nil || res.StatusCode != 201 {
					return fmt.Errorf("create: %v %v", res, err)
				}
				loc := res.Header.Get("Location")
				// The first piece declares the whole file and is cut off.
				g := newGen(seed, 0, size)
				g.fail = size/3 + int64(i)*40_009
				res, err = tus("PATCH", loc, tokens[i], g, "Content-Type", "application/offset+octet-stream", "Upload-Offset", "0")
				if err == nil {
					return fmt.Errorf("the cut piece was answered %d", res.StatusCode)
				}
				for try := 0; ; try++ {
					res, err = tus("HEAD", loc, tokens[i], nil)
					if err != nil || res.StatusCode != 200 {
						return fmt.Errorf("HEAD: %v %v", res, err)
					}
					at, _ := strconv.ParseInt(res.Header.Get("Upload-Offset"), 10, 64)
					req, _ := http.NewRequest("PATCH", base+loc, newGen(seed, at, size))
					req.ContentLength = size - at
					req.Header.Set("Authorization", "Bearer "+tokens[i])
					req.Header.Set("Tus-Resumable", "1.0.0")
					req.Header.Set("Content-Type", "application/offset+octet-stream")
					req.Header.Set("Upload-Offset", strconv.FormatInt(at, 10))
					res, err = c.Do(req)
					if err != nil {
						return fmt.Errorf("resume at %d: %v", at, err)
					}
					res.Body.Close()
					if res.StatusCode == 204 {
						break
					}
					// 409: the cut piece was still being read when HEAD
					// answered; ask again.
					if res.StatusCode != 409 || try == 5 {
						return fmt.Errorf("resume at %d: %d", at, res.StatusCode)
					}
				}
				mid := res.Header.Get("Media-Id")
				h := sha256.New()
				io.Copy(h, newGen(seed, 0, size))
				req, _ := http.NewRequest("HEAD", base+"/api/v1/people/"+ids[i]+"/media/"+mid, nil)
				req.Header.Set("Authorization", "Bearer "+tokens[i])
				got, err := c.Do(req)
				if err != nil {
					return err
				}
				got.Body.Close()
				if want := `"` + hex.EncodeToString(h.Sum(nil)) + `"`; got.StatusCode != 200 || got.Header.Get("ETag") != want || got.ContentLength != size {
					return fmt.Errorf("media %s: %d, ETag %s want %s, %d bytes", mid, got.StatusCode, got.Header.Get("ETag"), want, got.ContentLength)
				}
				return nil
			}()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	peak := vmHWM(p.cmd.Process.Pid)
	t.Logf("%d resumable uploads of %d MiB, each cut once, in %s: peak VmHWM %d MiB", phones, size>>20, time.Since(began).Round(time.Second), peak>>20)
	if peak == 0 || peak > 200<<20 {
		t.Fatalf("peak VmHWM %d MiB over 20 concurrent resumable uploads: want under 200 MiB", peak>>20)
	}
}

// TestResumableUploadSurvivesKill9: the server is killed with SIGKILL while
// a piece is streaming in; after a restart on the same directory HEAD says
// an offset at least as far as the last acknowledged piece, the upload
// resumes from it and ends with the source's sha256.
func TestResumableUploadSurvivesKill9(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir)
	id, token := p.signup(t, "phone")
	const size = 8 << 20
	c := &http.Client{Timeout: time.Minute}
	tus := func(p *proc, method, path string, body io.Reader, n int64, hdr ...string) (*http.Response, error) {
		req, _ := http.NewRequest(method, "http://"+p.addr+path, body)
		req.ContentLength = n
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Tus-Resumable", "1.0.0")
		if body != nil {
			req.Header.Set("Content-Type", "application/offset+octet-stream")
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := c.Do(req)
		if err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		return res, err
	}
	res, err := tus(p, "POST", "/api/v1/uploads", nil, 0, "Upload-Length", strconv.Itoa(size))
	if err != nil || res.StatusCode != 201 {
		t.Fatalf("create: %v %v", res, err)
	}
	loc := res.Header.Get("Location")
	const acked = 3 << 20
	if res, err := tus(p, "PATCH", loc, newGen(7, 0, acked), acked, "Upload-Offset", "0"); err != nil || res.StatusCode != 204 {
		t.Fatalf("first piece: %v %v", res, err)
	}
	// The second piece trickles in; the server dies under it.
	pr, pw := io.Pipe()
	go func() {
		g := newGen(7, acked, size)
		buf := make([]byte, 64<<10)
		for {
			n, err := g.Read(buf)
			if err != nil || func() error { _, err := pw.Write(buf[:n]); return err }() != nil {
				pw.Close()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	go tus(p, "PATCH", loc, pr, size-acked, "Upload-Offset", strconv.Itoa(acked))
	time.Sleep(500 * time.Millisecond)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	pw.CloseWithError(errCut)

	p2 := start(t, dir)
	res, err = tus(p2, "HEAD", loc, nil, 0)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("HEAD after the restart: %v %v", res, err)
	}
	at, _ := strconv.ParseInt(res.Header.Get("Upload-Offset"), 10, 64)
	// Half a second of the second piece reached the file before the kill:
	// kept, although no state was saved after it.
	if at <= acked || at >= size {
		t.Fatalf("HEAD after kill -9: Upload-Offset %d, want past %d (acknowledged, and more arrived) and below %d", at, acked, size)
	}
	res, err = tus(p2, "PATCH", loc, newGen(7, at, size), size-at, "Upload-Offset", strconv.FormatInt(at, 10))
	if err != nil || res.StatusCode != 204 {
		t.Fatalf("resume at %d after the restart: %v %v", at, res, err)
	}
	h := sha256.New()
	io.Copy(h, newGen(7, 0, size))
	req, _ := http.NewRequest("HEAD", "http://"+p2.addr+"/api/v1/people/"+id+"/media/"+res.Header.Get("Media-Id"), nil)
	req.Header.Set("Authorization", "Bearer "+token)
	got, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got.Body.Close()
	if want := `"` + hex.EncodeToString(h.Sum(nil)) + `"`; got.StatusCode != 200 || got.Header.Get("ETag") != want {
		t.Fatalf("the media after kill -9 and a resume at %d: %d, ETag %s want %s", at, got.StatusCode, got.Header.Get("ETag"), want)
	}
	t.Logf("killed with %d of %d bytes acknowledged; resumed at %d", acked, size, at)
	p2.cmd.Process.Signal(syscall.SIGTERM)
	<-p2.done
}
