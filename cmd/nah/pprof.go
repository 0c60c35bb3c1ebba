//go:build pprof

package main

import (
	"fmt"
	"net/http"
	_ "net/http/pprof"
	"os"
)

// A profiling build (go build -tags pprof ./cmd/nah) serves net/http/pprof
// on NAH_PPROF_ADDR (e.g. 127.0.0.1:6060), apart from the app's listener;
// the release binary has none of it.
func init() {
	if addr := os.Getenv("NAH_PPROF_ADDR"); addr != "" {
		go func() { fmt.Fprintln(os.Stderr, "nah: pprof:", http.ListenAndServe(addr, nil)) }()
	}
}
