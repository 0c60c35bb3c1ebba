package testutil

import (
	"fmt"
	"net"
	"syscall"
	"testing"
)

// SlowGet sends one GET with token over a connection whose receive buffer
// is 4 KiB and returns it unread: the server's writes block as a slow
// phone's would. The connection closes with the test.
func SlowGet(t testing.TB, addr, path, token string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return err
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", path, token)
	return conn
}
