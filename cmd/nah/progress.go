package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// The progress line `nah restore` prints while it restores.

// progress shows how far a restore is: a bar redrawn in place on a
// terminal, else a line at every tenth of the files.
type progress struct {
	w        io.Writer
	terminal bool
	total    int
	done     int
	bytes    int64
	start    time.Time
	drawn    time.Time
	tenth    int
}

func newProgress(w io.Writer, total int) *progress {
	return &progress{w: w, terminal: isTerminal(w), total: total, start: time.Now()}
}

// isTerminal says whether w is a character device (a terminal), not a
// file or a pipe.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// add counts one more file of n bytes; the caller serialises calls.
func (p *progress) add(n int64) {
	p.done++
	p.bytes += n
	if p.terminal {
		if now := time.Now(); now.Sub(p.drawn) >= 100*time.Millisecond || p.done == p.total {
			p.drawn = now
			const width = 30
			full := width * p.done / p.total
			fmt.Fprintf(p.w, "\r[%s%s] %d/%d files, %.1f MB, %.1f s", strings.Repeat("#", full), strings.Repeat(".", width-full),
				p.done, p.total, float64(p.bytes)/1e6, time.Since(p.start).Seconds())
		}
		return
	}
	if t := 10 * p.done / p.total; t > p.tenth {
		p.tenth = t
		fmt.Fprintf(p.w, "restore: %d%% (%d/%d files, %.1f MB, %.1f s)\n", 10*t, p.done, p.total, float64(p.bytes)/1e6, time.Since(p.start).Seconds())
	}
}

func (p *progress) finish() {
	if p.terminal && p.done > 0 {
		fmt.Fprintln(p.w)
	}
}
