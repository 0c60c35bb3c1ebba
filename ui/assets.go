// Package ui owns the admin console's templ components and its embedded,
// vendored assets (htmx 2.0.11, Pico CSS 2.1.1 classless; see ui/static and
// their licences). Every page and fragment takes a typed struct; ui never
// touches the store: handlers in app fill the structs.
//
// After editing a .templ file, run `make generate` (go tool templ generate,
// from the repository root) and commit the generated *_templ.go files.
package ui

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"

	"github.com/nah-app/nah"
)

// assets maps a file name to its content-hashed name and back, built once.
var assets = func() struct{ hashed, plain map[string]string } {
	a := struct{ hashed, plain map[string]string }{map[string]string{}, map[string]string{}}
	entries, err := fs.ReadDir(nah.UIStatic, "ui/static")
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		b, err := fs.ReadFile(nah.UIStatic, "ui/static/"+e.Name())
		if err != nil {
			panic(err)
		}
		sum := sha256.Sum256(b)
		ext := path.Ext(e.Name())
		h := strings.TrimSuffix(e.Name(), ext) + "." + hex.EncodeToString(sum[:6]) + ext
		a.hashed[e.Name()] = h
		a.plain[h] = e.Name()
	}
	return a
}()

// Asset returns the URL of a vendored asset under its content-hashed name.
func Asset(name string) string {
	h, ok := assets.hashed[name]
	if !ok {
		panic("ui: no asset " + name)
	}
	return "/static/" + h
}

// StaticHandler serves /static/{hashed name} with a year-long, immutable
// cache lifetime: a new version has a new name.
func StaticHandler() http.Handler {
	sub, _ := fs.Sub(nah.UIStatic, "ui/static")
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plain, ok := assets.plain[path.Base(r.URL.Path)]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + plain
		files.ServeHTTP(w, r2)
	})
}
