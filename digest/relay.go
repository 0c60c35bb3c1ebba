package digest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"
)

// push is one notification to one device, as the relay receives it: a JSON
// POST to NAH_PUSH_RELAY_URL with "Authorization: Bearer
// NAH_PUSH_RELAY_TOKEN". DigestID is the same for every try of one
// person's digest of one day, also across a restart, so that the relay can
// drop a push it has already delivered (see Loop).
type push struct {
	DigestID string   `json:"digest_id"`
	Token    string   `json:"token"`
	Platform string   `json:"platform"`
	Title    string   `json:"title"`
	Body     string   `json:"body"`
	Count    int      `json:"count"`
	Authors  []string `json:"authors"`
}

// outcome is what became of a push.
type outcome int

const (
	delivered outcome = iota // the relay took it (2xx)
	gone                     // 410: the device is unregistered; drop it
	failed                   // refused, or no answer after every try
)

// relay posts pushes to the push relay. It never logs or returns a device
// token: its errors name the status or the network's failure only, and
// never carry the relay's answer, which might echo the push.
type relay struct {
	url, token string
	client     *http.Client
	timeout    time.Duration
	attempts   int
	backoff    time.Duration
	latency    *histogram
}

func newRelay(cfg Config, latency *histogram) *relay {
	return &relay{
		url: cfg.RelayURL, token: cfg.RelayToken, timeout: cfg.Timeout, attempts: cfg.Attempts,
		backoff: cfg.Backoff, latency: latency,
		client: &http.Client{
			Transport: &http.Transport{
				Proxy:               http.ProxyFromEnvironment,
				MaxIdleConnsPerHost: cfg.Workers, // one kept-alive connection per worker
				IdleConnTimeout:     90 * time.Second,
				TLSHandshakeTimeout: cfg.Timeout,
				ForceAttemptHTTP2:   true,
			},
			// A redirect would carry the bearer secret and the device
			// token somewhere else: the first answer is the answer.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

// retryBudget bounds the retries of one run: when the relay is down, every
// push fails its first try, and retrying each would multiply the run's
// work instead of keeping the schedule.
type retryBudget struct{ left atomic.Int64 }

func (b *retryBudget) take() bool { return b.left.Add(-1) >= 0 }

// send posts p (a push or a keyChangePush), trying again after a network failure, a 429 or a 5xx, up
// to r.attempts tries in all, while budget lasts, with exponential backoff
// and jitter. ctx ends the retries and the try under way (the person's
// time is up or the run's deadline passed); stop ends only the retries (the
// loop is stopping). A try finishes within r.timeout in any case.
func (r *relay) send(ctx context.Context, stop <-chan struct{}, p any, budget *retryBudget) (outcome, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return failed, err
	}
	var last error
	for try := 0; ; try++ {
		retry := false
		var oc outcome
		oc, retry, last = r.try(ctx, body)
		if oc != failed || !retry || try+1 >= r.attempts || ctx.Err() != nil || !budget.take() {
			return oc, last
		}
		// Full jitter over the doubling backoff: retries of many pushes
		// spread out instead of arriving together.
		d := r.backoff << try
		d = d/2 + rand.N(d/2+1)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return failed, last
		case <-stop:
			return failed, last
		}
	}
}

// try is one POST. retry says whether another try may succeed.
func (r *relay) try(ctx context.Context, body []byte) (oc outcome, retry bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(body))
	if err != nil {
		return failed, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	start := time.Now()
	resp, err := r.client.Do(req)
	r.latency.observe(time.Since(start))
	if err != nil {
		// url.Error repeats the relay's URL, which may hold credentials.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %v", r.timeout)
		}
		return failed, true, fmt.Errorf("relay: %w", err)
	}
	// Drained (a little) so that the connection is kept for the next push.
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return delivered, false, nil
	case c == http.StatusGone:
		return gone, false, nil
	case c == http.StatusTooManyRequests || c >= 500:
		return failed, true, fmt.Errorf("relay answered %d %s", c, http.StatusText(c))
	default:
		return failed, false, fmt.Errorf("relay answered %d %s", c, http.StatusText(c))
	}
}
