package app

import "net/http"

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
	//   - style-src 'self' 'unsafe-inline': the layout's <style> block, the
	//     chart legend's style attributes and htmx's indicator styles are
	//     inline; inline CSS cannot run script. Moving them into the
	//     vendored stylesheet would let this drop to 'self';
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
