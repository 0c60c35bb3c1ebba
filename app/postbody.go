package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"sync"

	"github.com/nah-app/nah"
)

// postBufs holds the request buffers of posts. A buffer is kept only up to
// maxPooledPost (a post of the bench's 400 bytes is a 560-byte request);
// bigger ones go to the garbage collector, so idle buffers stay small.
var postBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledPost = 64 << 10

// readPost reads a post's request, at most limit bytes, into a pooled
// buffer, to be given back with putPost once the body is decoded.
func readPost(w http.ResponseWriter, r *http.Request, limit int64) (*bytes.Buffer, error) {
	buf := postBufs.Get().(*bytes.Buffer)
	buf.Reset()
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		putPost(buf)
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return nil, nah.Errorf(nah.TooLarge, "body_too_large", "the request body is over %d bytes", limit)
		}
		return nil, nah.Errorf(nah.Invalid, "invalid_json", "the request body is not the JSON object expected")
	}
	return buf, nil
}

func putPost(buf *bytes.Buffer) {
	if buf.Cap() <= maxPooledPost {
		postBufs.Put(buf)
	}
}

// fastPostBody is the base64 text of the request {"body":"..."}, read in
// place, when the request is exactly that (what every phone sends); ok is
// false otherwise, and slowPostBody decodes it. The fast path takes the
// JSON decode out of a post's CPU (bench/THRESHOLDS.md, "The post's own
// path").
func fastPostBody(raw []byte) (text []byte, ok bool) {
	const open, end = `{"body":"`, `"}`
	b := bytes.TrimRight(raw, " \t\r\n")
	if !bytes.HasPrefix(b, []byte(open)) || !bytes.HasSuffix(b, []byte(end)) || len(b) < len(open)+len(end) {
		return nil, false
	}
	text = b[len(open) : len(b)-len(end)]
	return text, onlyBase64(text)
}

// slowPostBody decodes any other request with encoding/json and
// decodeJSON's answers, so that both paths say the same of every request.
// It holds, beside raw, the decoder's buffer and two copies of the text:
// at most 3 times raw's limit more.
func slowPostBody(raw []byte, limit int64) ([]byte, error) {
	var in struct {
		Body jsonString `json:"body"`
	}
	if err := decodeFrom(json.NewDecoder(bytes.NewReader(raw)), limit, &in); err != nil {
		return nil, err
	}
	return []byte(in.Body), nil
}

// onlyBase64 reports whether every byte of b is of standard base64's
// alphabet or its padding: such a JSON string has no escapes, so its
// bytes are its value.
func onlyBase64(b []byte) bool {
	for _, c := range b {
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '+', c == '/', c == '=':
		default:
			return false
		}
	}
	return true
}
