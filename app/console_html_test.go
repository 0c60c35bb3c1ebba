package app

import (
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// consoleDoc is a console page parsed as a browser would, so that a test
// checks an element by id, role or data-testid and its text, rather than
// a string anywhere in the markup.
type consoleDoc struct{ root *html.Node }

func parseConsole(t *testing.T, body string) consoleDoc {
	t.Helper()
	n, err := html.Parse(strings.NewReader(body))
	if err != nil {
		t.Fatalf("the page does not parse: %v", err)
	}
	return consoleDoc{n}
}

func attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

// find is every element whose attribute key is val, in document order.
func (d consoleDoc) find(key, val string) []*html.Node {
	var out []*html.Node
	for n := range d.root.Descendants() {
		if v, ok := attr(n, key); n.Type == html.ElementNode && ok && v == val {
			out = append(out, n)
		}
	}
	return out
}

// byID is the element of that id, nil when there is none.
func (d consoleDoc) byID(id string) *html.Node {
	if ns := d.find("id", id); len(ns) > 0 {
		return ns[0]
	}
	return nil
}

// text is an element's text, its white space runs made one space, as
// innerText gives it for one line; "" for nil.
func text(n *html.Node) string {
	if n == nil {
		return ""
	}
	var b strings.Builder
	for c := range n.Descendants() {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		}
	}
	return strings.Join(strings.Fields(b.String()), " ")
}
