package app

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nah-app/nah"
)

// slowClient is an HTTP client over real TCP whose socket receives into a
// 4 KiB buffer, as a phone on a slow link that reads little at a time;
// jar carries an admin's cookie for the console.
func slowClient(jar http.CookieJar) *http.Client {
	d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return err
	}}
	return &http.Client{Jar: jar, Transport: &http.Transport{DialContext: d.DialContext, DisableCompression: true}}
}

// slowReader reads r at rate bytes a second at most, 4 KiB at a time.
type slowReader struct {
	r     io.Reader
	rate  float64
	start time.Time
	n     int64
}

func (s *slowReader) Read(b []byte) (int, error) {
	if ahead := time.Duration(float64(s.n)/s.rate*float64(time.Second)) - time.Since(s.start); ahead > 0 {
		time.Sleep(ahead)
	}
	n, err := s.r.Read(b[:min(len(b), 4096)])
	s.n += int64(n)
	return n, err
}

// slowDownload gets u with c and reads the answer at rate through check,
// which reads it to its end or fails; it returns the bytes read.
func slowDownload(c *http.Client, u, token string, rate float64, check func(io.Reader) error) (int64, error) {
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		return 0, errors.New(res.Status)
	}
	sr := &slowReader{r: res.Body, rate: rate, start: time.Now()}
	err = check(sr)
	return sr.n, err
}

// readTar reads a tar to its end.
func readTar(r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		if _, err := tr.Next(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if _, err := io.Copy(io.Discard, tr); err != nil {
			return err
		}
	}
}

// TestSlowReadersFinish: an export and the full backup go on to their end
// for a client that reads a little faster than the minimum rate, over real
// TCP with a small receive buffer. The pace is scaled down 49 times (800 kB/s
// for 16 KiB/s, the client at 1 MB/s as 20,000 B/s is to it), through the same
// Transfer as the server's; the kernel buffers megabytes of it whatever the
// pace, so a deadline per write expires while the client still reads.
func TestSlowReadersFinish(t *testing.T) {
	const rate = 1_000_000
	ts := newTestServer(t, func(c *serverConfig) {
		c.Transfer = Transfer{Grace: 500 * time.Millisecond, MinRate: 800_000}
	})
	ann := ts.signup(t, "ann")
	// 6 MB of random bodies, which the full backup's gzip cannot shrink.
	ms := make([]nah.Moment, 96)
	for i := range ms {
		at := int64(1_700_000_000_000 + i*1000)
		ms[i] = nah.Moment{ID: nah.NewMomentID(at), Author: ann.id, CreatedAt: at, Body: make([]byte, 64<<10)}
		rand.Read(ms[i].Body)
	}
	if err := ts.store.ImportMoments(context.Background(), ann.id, ms); err != nil {
		t.Fatal(err)
	}
	admin := signedInAdmin(t, ts)

	var wg sync.WaitGroup
	for _, d := range []struct {
		name, path, token string
		check             func(io.Reader) error
	}{
		{"export", "/api/v1/me/export", ann.token, readTar},
		{"full backup", "/console/backups/download", "", func(r io.Reader) error {
			z, err := gzip.NewReader(r)
			if err != nil {
				return err
			}
			return readTar(z)
		}},
	} {
		wg.Go(func() {
			start := time.Now()
			n, err := slowDownload(slowClient(admin.Jar), ts.URL+d.path, d.token, rate, d.check)
			took := time.Since(start)
			t.Logf("%s: %d bytes at %.0f B/s in %v: %v", d.name, n, float64(n)/took.Seconds(), took.Round(time.Millisecond), err)
			if err != nil || n < 6<<20 {
				t.Errorf("%s read at %d B/s: cut off after %d bytes and %v: %v", d.name, rate, n, took.Round(time.Millisecond), err)
			}
		})
	}
	wg.Wait()
}
