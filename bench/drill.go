package main

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/nah-app/nah/store"
)

// DrillLoad is what `run -drill` records: restore drills kept running
// through the measured phases (the next asked for from the console within
// 100 ms of the one before ending), so the phases include the drill's cost.
type DrillLoad struct {
	Started int    `json:"started"`
	Last    string `json:"last"` // the Backups page's line about the last drill
}

// adminSession makes an admin and a console session in the data directory
// before the server starts, as the console's setup link would.
func adminSession(ctx context.Context, data string) (string, error) {
	s, err := store.Open(ctx, store.Config{Dir: data})
	if err != nil {
		return "", err
	}
	defer s.Close()
	link, err := s.CreateLink(ctx, store.LinkAdmin, "", time.Hour)
	if err != nil {
		return "", err
	}
	ad, err := s.Admins().CreateWithLink(ctx, link, "bench", "unused")
	if err != nil {
		return "", err
	}
	return s.Admins().CreateSession(ctx, ad.ID, 12*time.Hour)
}

var drillLineRE = regexp.MustCompile(`(Last drill|The first restore drill|No restore drill)[^<]*`)

// drillLoop asks for a drill every 100 ms until stop is called (the console
// answers "already running" while one runs); stop reports how many it
// started and the Backups page's line about the last one.
func drillLoop(base, cookie string) (stop func() DrillLoad) {
	c := newClient(1)
	do := func(method, path string) (string, error) {
		req, _ := http.NewRequest(method, base+path, nil)
		req.AddCookie(&http.Cookie{Name: "nah_admin", Value: cookie})
		res, err := c.Do(req)
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if res.StatusCode != 200 {
			return "", fmt.Errorf("%s %s: %s", method, path, res.Status)
		}
		return string(b), err
	}
	var out DrillLoad // written by the loop alone, read once finished is closed
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			if body, err := do("POST", "/console/backups/drill"); err == nil && strings.Contains(body, "A restore drill started") {
				out.Started++
			}
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() DrillLoad {
		close(done)
		<-finished
		if body, err := do("GET", "/console/backups"); err == nil {
			out.Last = html.UnescapeString(drillLineRE.FindString(body))
		}
		return out
	}
}
