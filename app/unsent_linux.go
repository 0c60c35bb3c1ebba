package app

import (
	"net/http"
	"syscall"

	"golang.org/x/sys/unix"
)

// unsentBytes bounds what the kernel keeps unsent of a paced download
// (TCP_NOTSENT_LOWAT). Linux lets a socket's send buffer grow to 4 MiB
// (net.ipv4.tcp_wmem) and takes 2.8 MB from a loopback writer whose client
// reads nothing, 68 KB with this bound; what is in flight stays bound by
// the client's window, so the rate of a fast client does not change.
const unsentBytes = 64 << 10

// limitUnsent bounds the unsent bytes of r's connection at unsentBytes,
// for as long as it stays open. A connection that is not TCP is left be.
func limitUnsent(r *http.Request) {
	lc, ok := r.Context().Value(connKey{}).(*limitedConn)
	if !ok {
		return
	}
	sc, ok := lc.Conn.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, unsentBytes)
	})
}
