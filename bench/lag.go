package main

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ReplicaLag is the replica's lag around the 16-writer phase, read from
// the server's metrics: the most it reached during the phase, and how long
// after the phase it took to come back to zero.
type ReplicaLag struct {
	DuringMaxS   float64 `json:"during_max_s"`
	CaughtUpS    float64 `json:"caught_up_after_s"` // -1: not within lagWaitAfter
	QueuedMax    int     `json:"queued_max"`        // files waiting to be taken up, at most
	SamplesTaken int     `json:"samples"`
}

// lagEvery is how often the lag is read; lagWaitAfter how long the bench
// waits after the phase for it to come back to zero.
const (
	lagEvery     = 250 * time.Millisecond
	lagWaitAfter = 60 * time.Second
)

// readLag reads the replica's lag in seconds and the queue from the
// metrics: nah_replica_lag_seconds, or on a server without it the larger
// of the queue's wait and the worst watched file's lag.
func readLag(metricsURL string) (lag float64, queued int, ok bool) {
	r, err := http.Get(metricsURL)
	if err != nil {
		return 0, 0, false
	}
	defer r.Body.Close()
	var direct, wait, worst float64
	has := false
	sc := bufio.NewScanner(r.Body)
	for sc.Scan() {
		name, v, found := strings.Cut(sc.Text(), " ")
		n, err := strconv.ParseFloat(v, 64)
		if !found || err != nil {
			continue
		}
		switch name {
		case "nah_replica_lag_seconds":
			direct, has = n, true
		case "nah_replica_queue_wait_seconds":
			wait = n
		case "nah_replica_worst_lag_seconds":
			worst = n
		case "nah_replica_queue":
			queued = int(n)
		}
	}
	if has {
		return direct, queued, true
	}
	return max(wait, worst), queued, true
}

// watchLag samples the lag until stop is closed, then waits for it to be
// zero; the result arrives on the returned channel.
func watchLag(metricsURL string, stop <-chan struct{}) <-chan ReplicaLag {
	out := make(chan ReplicaLag, 1)
	go func() {
		var res ReplicaLag
		t := time.NewTicker(lagEvery)
		defer t.Stop()
	during:
		for {
			select {
			case <-stop:
				break during
			case <-t.C:
			}
			if lag, q, ok := readLag(metricsURL); ok {
				res.SamplesTaken++
				res.DuringMaxS = max(res.DuringMaxS, lag)
				res.QueuedMax = max(res.QueuedMax, q)
			}
		}
		t0 := time.Now()
		res.CaughtUpS = -1
		for time.Since(t0) < lagWaitAfter {
			if lag, _, ok := readLag(metricsURL); ok && lag == 0 {
				res.CaughtUpS = time.Since(t0).Seconds()
				break
			}
			time.Sleep(lagEvery)
		}
		out <- res
	}()
	return out
}
