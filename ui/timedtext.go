package ui

import (
	"context"
	"io"
	"regexp"
	"time"

	"github.com/a-h/templ"
)

// timeInText finds the times WhenT and When write into a sentence (a
// refusal's "2026-01-31 18:00:00 UTC is in the future").
var timeInText = regexp.MustCompile(`\d{4}-\d{2}-\d{2} \d{2}:\d{2}(:\d{2})? UTC`)

// timedText is msg with each time in it marked up as a <time datetime>,
// which console.js shows to the second in the reader's zone (data-exact);
// without JavaScript the UTC text stays. Errors stay plain sentences, for
// the API's JSON as for the console.
func timedText(msg string) templ.Component {
	return templ.ComponentFunc(func(ctx context.Context, w io.Writer) error {
		rest := msg
		for _, loc := range timeInText.FindAllStringIndex(msg, -1) {
			// loc is into msg; rest starts where the last match ended.
			start := len(msg) - len(rest)
			s := msg[loc[0]:loc[1]]
			layout := "2006-01-02 15:04 UTC"
			if len(s) == len("2006-01-02 15:04:05 UTC") {
				layout = "2006-01-02 15:04:05 UTC"
			}
			t, err := time.Parse(layout, s)
			if err != nil {
				continue // not a time (a 25th hour): left as text
			}
			if _, err := io.WriteString(w, templ.EscapeString(msg[start:loc[0]])); err != nil {
				return err
			}
			if _, err := io.WriteString(w, `<time datetime="`+t.UTC().Format(time.RFC3339)+`" data-exact>`+templ.EscapeString(s)+`</time>`); err != nil {
				return err
			}
			rest = msg[loc[1]:]
		}
		_, err := io.WriteString(w, templ.EscapeString(rest))
		return err
	})
}
