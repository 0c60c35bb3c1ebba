package app

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
)

// Media: uploads streamed to disk through one pooled buffer, downloads by
// http.ServeContent (Range, ETag), deletes; the store keeps files, rows and
// quota (store/person_media.go). The same bytes uploaded twice are two media, never
// deduplicated (docs/api.md "Media": a delete would remove another's copy).

const (
	// transferCost is what an upload or download in flight holds besides
	// its request's base cost: the 32 KiB copy buffer, net/http's read and
	// write buffers, the sha256 state, rounded up. Never the file: an
	// upload is written as it arrives, a download read as it leaves
	// (sendfile where the system has it).
	transferCost = 64 << 10
	copyBuffer   = 32 << 10

	// DefaultTransferGrace and DefaultMinTransferRate bound how long a
	// transfer may take, in place of the server's 30 s read and write
	// timeouts, which would cut off a 25 MiB upload on a slow phone link:
	// an upload must have sent, at any moment, at least MinRate bytes a
	// second since it began, after Grace; a download of n bytes must be
	// read within Grace + n/MinRate. 16 KiB/s is an EDGE link, the
	// slowest a phone still uploads on: 25 MiB may take 27 minutes, and a
	// client that stalls is cut off within Grace of falling behind.
	DefaultTransferGrace   = 30 * time.Second
	DefaultMinTransferRate = 16 << 10

	// maxContentType bounds the media type kept with a file.
	maxContentType = 255
)

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, copyBuffer); return &b }}

// Transfer is how long uploads and downloads of media may take (see
// DefaultTransferGrace); zero values are the defaults. Tests shorten it.
type Transfer struct {
	Grace   time.Duration
	MinRate int64 // bytes a second
}

// deadline is when a transfer that began at start must have moved n bytes.
func (t Transfer) deadline(start time.Time, n int64) time.Time {
	return start.Add(t.Grace + time.Duration(float64(n)/float64(t.MinRate)*float64(time.Second)))
}

// handleMediaCreate stores the raw request body as a new media file of the
// signed-in person.
func (a *App) handleMediaCreate(w http.ResponseWriter, r *http.Request) {
	me := sessionOf(r).person.ID
	limit := a.cfg.MaxMediaBytes
	tooLarge := nah.Errorf(nah.TooLarge, "body_too_large", "a media file is at most %d bytes", limit)
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close") // the body is not read
		a.writeError(w, r, tooLarge)
		return
	}
	if r.ContentLength == 0 { // a chunked empty body is refused at the commit
		a.writeError(w, r, store.ErrEmptyMedia())
		return
	}
	ct, err := mediaType(r.Header.Get("Content-Type"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	idem, err := idemOf(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if idem != nil {
		release, err := a.uploading.take(me, idem.Key)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		defer release()
	}
	if err := a.takeOrOverloaded(transferCost); err != nil {
		a.writeError(w, r, err)
		return
	}
	defer a.mem.give(transferCost)
	if idem != nil {
		// A retry of an upload that was stored is only hashed, not kept:
		// it needs neither disk nor quota (which the first may have filled).
		hash, answer, err := a.store.IdemStored(r.Context(), me, idem.Key)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		if answer != nil {
			sum := sha256.New()
			if !a.receive(w, r, sum, tooLarge) {
				return
			}
			if !bytes.Equal(hash, idemHash("POST /media", []byte(ct), sum.Sum(nil))) {
				a.writeError(w, r, store.ErrIdemReused())
				return
			}
			writeCreated(w, answer, true)
			return
		}
	}
	up, err := a.store.StartUpload(r.Context(), me, a.cfg.QuotaBytes)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	defer up.Abort()
	if r.ContentLength > 0 {
		if err := up.Reserve(r.ContentLength); err != nil {
			w.Header().Set("Connection", "close")
			a.writeError(w, r, err)
			return
		}
	}
	if !a.receive(w, r, up, tooLarge) {
		return // the deferred Abort removes the temporary file
	}
	if idem == nil {
		m, err := up.Commit(r.Context(), ct)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusCreated, mediaJSON{m.ID, m.Size, m.SHA256, m.ContentType, nah.FormatTime(m.CreatedAt)})
		return
	}
	idem.Hash = idemHash("POST /media", []byte(ct), up.SHA256())
	m, replay, err := up.CommitOnce(r.Context(), ct, idem)
	switch {
	case err != nil:
		a.writeError(w, r, err)
	case replay != nil:
		writeCreated(w, replay, true)
	default:
		writeCreated(w, answerJSON(m), false)
	}
}

// receive copies an upload's body to dst at the paced rate (Transfer) and
// reports whether it all arrived; when not, it has answered, or it panics
// with http.ErrAbortHandler for a client that stalled or went away.
func (a *App) receive(w http.ResponseWriter, r *http.Request, dst io.Writer, tooLarge error) bool {
	start := time.Now()
	rc := http.NewResponseController(w)
	// The answer is written after the whole body: its deadline is the
	// slowest body's, plus the server's own write timeout.
	rc.SetWriteDeadline(a.cfg.Transfer.deadline(start, a.cfg.MaxMediaBytes).Add(writeTimeout))
	body := &pacedReader{r: http.MaxBytesReader(w, r.Body, a.cfg.MaxMediaBytes), rc: rc, t: a.cfg.Transfer, start: start}
	buf := copyBuffers.Get().(*[]byte)
	_, err := io.CopyBuffer(dst, body, *buf)
	copyBuffers.Put(buf)
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		a.writeError(w, r, tooLarge)
		return false
	case body.err != nil && body.err != io.EOF:
		// The client stalled below the minimum rate, or went away: no
		// one is there to read an answer.
		panic(http.ErrAbortHandler)
	case err != nil: // the quota, or the disk
		a.writeError(w, r, err)
		return false
	}
	return true
}

type mediaJSON struct {
	ID          string `json:"id"`
	Size        int64  `json:"size"`
	SHA256      string `json:"sha256"`
	ContentType string `json:"content_type"`
	CreatedAt   string `json:"created_at"`
}

// pacedReader reads a request body under a read deadline that moves
// forward with every byte received (Transfer), and keeps its own error
// apart from the writer's.
type pacedReader struct {
	r     io.Reader
	rc    *http.ResponseController
	t     Transfer
	start time.Time
	n     int64
	err   error
	// stopped, if set, ends the reads (a resumable upload's piece taken
	// over): checked after the deadline is set, which its setter moves
	// to now after setting it, so a read in progress ends too.
	stopped *atomic.Bool
}

func (p *pacedReader) Read(b []byte) (int, error) {
	p.rc.SetReadDeadline(p.t.deadline(p.start, p.n))
	if p.stopped != nil && p.stopped.Load() {
		p.err = errTakenOver
		return 0, p.err
	}
	n, err := p.r.Read(b)
	p.n += int64(n)
	p.err = err
	return n, err
}

// mediaType checks an upload's Content-Type and returns it as it is kept:
// normalised, application/octet-stream when there is none or it is a
// wildcard (*/*, image/*: what a generated client sends when the document
// offers a range), so that no file is ever served back as */*.
func mediaType(v string) (string, error) {
	if v == "" {
		return "application/octet-stream", nil
	}
	mt, params, err := mime.ParseMediaType(v)
	if err == nil && strings.Contains(mt, "*") {
		return "application/octet-stream", nil
	}
	if err == nil && strings.Contains(mt, "/") {
		if v = mime.FormatMediaType(mt, params); v != "" && len(v) <= maxContentType {
			return v, nil
		}
	}
	return "", nah.Errorf(nah.Invalid, "invalid_content_type", "Content-Type must be a media type such as image/jpeg, of at most %d bytes", maxContentType)
}

// servedType is the Content-Type a file is served with: as uploaded,
// except the types a browser would run or lay out as a page (HTML, XHTML,
// SVG, XML, scripts), which go out as application/octet-stream.
func servedType(ct string) string {
	mt, _, _ := mime.ParseMediaType(ct)
	for _, active := range []string{"html", "xml", "svg", "script"} {
		if strings.Contains(mt, active) {
			return "application/octet-stream"
		}
	}
	return ct
}

// handleMediaGet serves media_id of person id to themselves or a
// connection; to anyone else, and for a missing media, the same 404.
func (a *App) handleMediaGet(w http.ResponseWriter, r *http.Request) {
	me, id := sessionOf(r).person.ID, pathParam(r, "id")
	if ok, err := a.mayRead(r, me, id); err != nil || !ok {
		if err == nil {
			err = nah.Errorf(nah.NotFound, "", "no such media")
		}
		a.writeError(w, r, err)
		return
	}
	f, m, err := a.store.OpenMedia(r.Context(), id, pathParam(r, "media_id"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	defer f.Close()
	if err := a.takeOrOverloaded(transferCost); err != nil {
		a.writeError(w, r, err)
		return
	}
	defer a.mem.give(transferCost)
	h := w.Header()
	h.Set("Content-Type", servedType(m.ContentType))
	h.Set("Content-Disposition", "attachment")
	h.Set("Cache-Control", "private")
	h.Set("ETag", `"`+m.SHA256+`"`)
	http.NewResponseController(w).SetWriteDeadline(a.cfg.Transfer.deadline(time.Now(), m.Size))
	// A suffix range of zero bytes selects nothing (RFC 9110 14.1.2), but
	// ServeContent answers bytes=-0 with 206 and "bytes 1000-999/1000".
	if rg := r.Header.Get("Range"); rg != "" {
		rest, ok := dropZeroSuffixes(rg)
		if !ok {
			h.Set("Content-Range", fmt.Sprintf("bytes */%d", m.Size))
			for _, k := range []string{"Content-Disposition", "Cache-Control", "ETag"} {
				h.Del(k)
			}
			a.writeError(w, r, nah.Errorf(nah.RangeNotSatisfiable, "", "the Range selects no byte of this file (bytes */%d)", m.Size))
			return
		}
		r.Header.Set("Range", rest)
	}
	// No modification time: the ETag is the validator (a media file never
	// changes), and If-Modified-Since would only be a weaker second one.
	http.ServeContent(&rangeRefusal{ResponseWriter: w, a: a, r: r}, r, "", time.Time{}, f)
}

// dropZeroSuffixes returns a Range header without its zero-length suffix
// ranges ("-0"), and false when it had nothing else: then no range is
// satisfiable. A header that is not bytes= is returned as it is.
func dropZeroSuffixes(rg string) (string, bool) {
	spec, ok := strings.CutPrefix(rg, "bytes=")
	if !ok {
		return rg, true
	}
	var keep []string
	for part := range strings.SplitSeq(spec, ",") {
		part = strings.TrimSpace(part)
		if n, ok := strings.CutPrefix(part, "-"); ok && n != "" && strings.Trim(n, "0") == "" {
			continue
		}
		keep = append(keep, part)
	}
	if len(keep) == 0 {
		return "", false
	}
	return "bytes=" + strings.Join(keep, ","), true
}

// rangeRefusal turns ServeContent's plain-text 416, and its bare 412 of a
// failed If-Match, into the API's error body, keeping the 416's
// Content-Range. Everything else passes through; ReadFrom keeps the file's
// sendfile path.
type rangeRefusal struct {
	http.ResponseWriter
	a       *App
	r       *http.Request
	refused bool
}

func (w *rangeRefusal) WriteHeader(code int) {
	if code != http.StatusRequestedRangeNotSatisfiable && code != http.StatusPreconditionFailed {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.refused = true
	h := w.Header()
	for _, k := range []string{"Content-Disposition", "Cache-Control", "ETag"} {
		h.Del(k)
	}
	if code == http.StatusPreconditionFailed {
		w.a.writeError(w.ResponseWriter, w.r, nah.Errorf(nah.PreconditionFailed, "", "If-Match names another version of this file than the one stored"))
		return
	}
	w.a.writeError(w.ResponseWriter, w.r, nah.Errorf(nah.RangeNotSatisfiable, "", "the Range selects no byte of this file (%s)", h.Get("Content-Range")))
}

func (w *rangeRefusal) Write(b []byte) (int, error) {
	if w.refused {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

func (w *rangeRefusal) ReadFrom(src io.Reader) (int64, error) {
	return io.Copy(w.ResponseWriter, src)
}

func (w *rangeRefusal) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// handleMediaDelete deletes one's own media; anyone else's is 404.
func (a *App) handleMediaDelete(w http.ResponseWriter, r *http.Request) {
	if err := a.store.DeleteMedia(r.Context(), sessionOf(r).person.ID, pathParam(r, "media_id")); err != nil {
		a.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
