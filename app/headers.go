package app

import (
	"net/http"

	"github.com/nah-app/nah"
)

// Headers on every response of every listener (NewServer adds them):
//   - nosniff: a JSON body or a moment's text is never sniffed into HTML;
//   - X-Frame-Options DENY (and frame-ancestors 'none'): no clickjacking;
//   - Content-Security-Policy: one policy serves every route;
//   - Strict-Transport-Security, over TLS only (browsers ignore it on HTTP).
const (
	// contentSecurityPolicy: no inline script and no eval (so no hx-on or
	// trigger filters); inline styles for the chart legend and htmx's
	// indicators; data: images for Pico's form icons.
	contentSecurityPolicy = "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
		"form-action 'self'; base-uri 'none'; object-src 'none'; frame-ancestors 'none'"
)

// secureHeaders sets the headers above before next answers.
func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		if r.TLS != nil {
			h.Set("Strict-Transport-Security", hstsHeader) // tls.go
		}
		next.ServeHTTP(w, r)
	})
}

// maxRequestHeader is the SPEC's bound on a request's header: 16 KiB,
// counted by headerSize. Over it the answer is 431 headers_too_large.
const maxRequestHeader = 16 << 10

// headerSize is r's header as written plainly, without the final blank line:
// method+target+proto+4 for the request line, name+value+4 for each value
// (Host, Transfer-Encoding and Trailer counted from where net/http moved them).
func headerSize(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
	for name, values := range r.Header {
		for _, v := range values {
			n += len(name) + len(v) + 4
		}
	}
	if r.Host != "" {
		n += len("Host") + len(r.Host) + 4
	}
	for _, v := range r.TransferEncoding {
		n += len("Transfer-Encoding") + len(v) + 4
	}
	if len(r.Trailer) > 0 {
		n += len("Trailer") + 4
		for name := range r.Trailer {
			n += len(name) + 2
		}
		n -= 2
	}
	return n
}

// limitHeaders answers 431 with the SPEC's error (the console's page for the
// console) to a header over maxRequestHeader, on every request of a
// connection; net/http's bound lets 4-8 KiB more through (app.go).
func (a *App) limitHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := headerSize(r); n > maxRequestHeader {
			err := nah.Errorf(nah.HeadersTooLarge, "", "the request's header is %d bytes; at most %d are taken", n, maxRequestHeader)
			a.refuse(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}
