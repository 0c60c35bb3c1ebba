package app

import (
	"net/http"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/ui"
)

// Headers on every response of every listener (NewServer adds them), API
// and metrics included, so that no route can forget them:
//
//   - X-Content-Type-Options: nosniff: a browser takes a response for what
//     its Content-Type says; a JSON body or a moment's text is never
//     sniffed into HTML or script.
//   - X-Frame-Options: DENY, and frame-ancestors 'none' in the policy: no
//     other site can frame the console and steer an admin's clicks
//     (clickjacking). frame-ancestors is the standard; X-Frame-Options is
//     for browsers that predate it.
//   - Content-Security-Policy: what the console's pages may load. A JSON
//     answer loads nothing, so one policy serves every route.
//   - Strict-Transport-Security, on answers over TLS only (a header on a
//     plain-HTTP answer is ignored by browsers, and says nothing true):
//     once a browser has met the server over HTTPS it never tries plain
//     HTTP again, where a network in the middle could answer instead.
const (
	// contentSecurityPolicy, part by part:
	//   - default-src 'self': scripts, fonts and htmx's requests come from
	//     this origin only; script-src is not relaxed further, so no inline
	//     script and no eval (the console has none, and uses no hx-on or
	//     trigger filters, the htmx features that would need eval);
	//   - style-src 'self' 'unsafe-inline': the chart legend's style
	//     attributes and htmx's indicator styles are inline; inline CSS
	//     cannot run script. Moving them into ui/static/console.css would
	//     let this drop to 'self';
	//   - img-src 'self' data:: Pico draws its form controls' icons as
	//     data: SVGs from its stylesheet;
	//   - form-action 'self', base-uri 'none', object-src 'none': an
	//     injected form cannot post a password elsewhere, an injected <base>
	//     cannot move relative URLs, and no plugin content runs;
	//   - frame-ancestors 'none': see above.
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

// headerSize is the size of r's header by the one rule the bound applies
// to: the request line and each header line written plainly ("Name: value",
// one space after the colon, nothing around the value), each with its CRLF;
// the blank line that ends the header is not counted:
//
//	len(method) + len(target) + len(proto) + 4   the request line
//	len(name) + len(value) + 4                   each header line
//
// A client that writes its header plainly sends exactly that many bytes
// before the blank line. A handler sees the request as net/http parsed it,
// so the lines are counted from that: a name repeated is a line per value;
// Host, Transfer-Encoding and Trailer, which net/http moves out of
// r.Header, are counted from r.Host, r.TransferEncoding and the names of
// r.Trailer (joined by ", "); whitespace around a value is not counted.
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

// limitHeaders answers 431 to a request whose header is over
// maxRequestHeader, before anything else looks at it. net/http's own
// bound (maxHeaderBytes, app.go) is the same, but net/http lets through up
// to 4 KiB more of buffering slack, so that it is this check that answers: with the SPEC's error, the console's page for the
// console, and the same bound on every request of a keep-alive connection
// (net/http's lets a reused connection through with up to 4 KiB more: it
// buffers that much of the next request before it starts counting).
func (a *App) limitHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := headerSize(r); n > maxRequestHeader {
			err := nah.Errorf(nah.HeadersTooLarge, "", "the request's header is %d bytes; at most %d are taken", n, maxRequestHeader)
			if isConsole(r) {
				a.consoleError(w, r, ui.Page{}, err)
			} else {
				a.writeError(w, r, err)
			}
			return
		}
		next.ServeHTTP(w, r)
	})
}
