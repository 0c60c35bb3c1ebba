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
// TCP with a small receive buffer, and one that reads at half of it is cut
// off. The pace is scaled up 24 times (400 kB/s for 16 KiB/s, a grace of
// 1 s, the clients at 500 kB/s as 20,000 B/s is to it, and 200 kB/s),
// through the same Transfer as the server's. Without a bound on what the
// kernel keeps unsent, it takes 2.8 MB at once and then lets a write on
// only once a megabyte has drained, so a deadline per write (1.08 s)
// expires while the client still reads (2 s); with it, a deadline per
// write never cuts off the reader at half the rate, which takes each write
// in 0.16 s.
func TestSlowReadersFinish(t *testing.T) {
	const rate = 500_000
	ts := newTestServer(t, func(c *serverConfig) {
		c.Transfer = Transfer{Grace: time.Second, MinRate: 400_000}
	})
	ann, bob := ts.signup(t, "ann"), ts.signup(t, "bob")
	// ann's 4 MB of random bodies, which the full backup's gzip cannot
	// shrink; bob's 2 MB of zeros, which it can.
	for _, p := range []account{ann, bob} {
		ms := make([]nah.Moment, 64)
		if p == bob {
			ms = ms[:32]
		}
		for i := range ms {
			at := int64(1_700_000_000_000 + i*1000)
			ms[i] = nah.Moment{ID: nah.NewMomentID(at), Author: p.id, CreatedAt: at, Body: make([]byte, 64<<10)}
			if p == ann {
				rand.Read(ms[i].Body)
			}
		}
		if err := ts.store.ImportMoments(context.Background(), p.id, ms); err != nil {
			t.Fatal(err)
		}
	}
	admin := signedInAdmin(t, ts)

	var wg sync.WaitGroup
	for _, d := range []struct {
		name, path, token string
		rate              float64
		check             func(io.Reader) error
	}{
		{"ann's export", "/api/v1/me/export", ann.token, rate, readTar},
		{"the full backup", "/console/backups/download", "", rate, func(r io.Reader) error {
			z, err := gzip.NewReader(r)
			if err != nil {
				return err
			}
			return readTar(z)
		}},
		{"bob's export, read at half the minimum rate", "/api/v1/me/export", bob.token, 200_000, readTar},
	} {
		wg.Go(func() {
			start := time.Now()
			n, err := slowDownload(slowClient(admin.Jar), ts.URL+d.path, d.token, d.rate, d.check)
			took := time.Since(start)
			t.Logf("%s: %d bytes at %.0f B/s in %v: %v", d.name, n, float64(n)/took.Seconds(), took.Round(time.Millisecond), err)
			switch {
			case d.rate >= rate && (err != nil || n < 4<<20):
				t.Errorf("%s read at %.0f B/s: cut off after %d bytes and %v: %v", d.name, d.rate, n, took.Round(time.Millisecond), err)
			case d.rate < rate && (err == nil || took > 6*time.Second):
				t.Errorf("%s: %d bytes in %v (%v), want cut off within a few seconds", d.name, n, took.Round(time.Millisecond), err)
			}
		})
	}
	wg.Wait()
}
