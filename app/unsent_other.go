//go:build !linux

package app

import "net/http"

// limitUnsent leaves the kernel's send buffer as it is: TCP_NOTSENT_LOWAT
// is set on Linux only (unsent_linux.go), and without it a client that
// stops reading is cut off once what the kernel took is due too.
func limitUnsent(*http.Request) {}
