package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
)

// ceilingCmd serves a static body of -size bytes at every path: the fastest
// a net/http server answering a feed-sized page can be on this machine. The
// load generator runs it as a child process, like the real server, and
// reports feeds/s as a ratio of it.
func ceilingCmd(args []string) error {
	fs := flag.NewFlagSet("ceiling", flag.ExitOnError)
	size := fs.Int("size", 17000, "body bytes")
	fs.Parse(args)
	body := make([]byte, *size)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "listen=%s\n", ln.Addr())
	length := strconv.Itoa(len(body))
	return http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", length)
		w.Write(body)
	}))
}
