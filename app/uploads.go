package app

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
)

// Resumable uploads speak tus 1.0.0 (https://tus.io/protocols/resumable-upload)
// with its creation, termination, expiration and checksum extensions, over
// store/person_uploads.go: POST creates, HEAD says the offset, PATCH appends a
// piece at it, DELETE abandons. The last piece makes the file a media.

const (
	tusVersion    = "1.0.0"
	tusExtensions = "creation,termination,expiration,checksum"
	// maxUploadMetadata bounds Upload-Metadata, kept with the upload.
	maxUploadMetadata = 4 << 10
)

type uploadJSON struct {
	ID        string `json:"id"`
	Length    int64  `json:"length"`
	Offset    int64  `json:"offset"`
	CreatedAt string `json:"created_at,omitempty"`
	ExpiresAt string `json:"expires_at"`
	MediaID   string `json:"media_id,omitempty"`
	Metadata  string `json:"metadata,omitempty"`
}

// tusRequests serves tus 1.0.0 on the uploads paths, before routing: every
// answer there says Tus-Resumable (a 401 or a 405 too), and a POST with
// X-HTTP-Method-Override is taken as the method it names, which tus says
// a server MUST do for clients whose runtime cannot send PATCH or DELETE.
func (a *App) tusRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if p != "/api/v1/uploads" && !strings.HasPrefix(p, "/api/v1/uploads/") {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Tus-Resumable", tusVersion)
		if m := r.Header.Get("X-HTTP-Method-Override"); r.Method == http.MethodPost && m != "" {
			r = r.WithContext(r.Context()) // a copy: a handler does not change its Request
			r.Method = strings.ToUpper(m)
		}
		next.ServeHTTP(w, r)
	})
}

// tusCheck refuses a request that does not speak tus 1.0.0 (412, with
// Tus-Version).
func (a *App) tusCheck(w http.ResponseWriter, r *http.Request) bool {
	if r.Header.Get("Tus-Resumable") != tusVersion {
		w.Header().Set("Tus-Version", tusVersion)
		a.writeError(w, r, nah.Errorf(nah.PreconditionFailed, "tus_version", "send Tus-Resumable: %s: uploads speak tus %s", tusVersion, tusVersion))
		return false
	}
	return true
}

// uploadHeaders describes res on the answer.
func uploadHeaders(w http.ResponseWriter, res store.Resumable) {
	h := w.Header()
	h.Set("Upload-Offset", strconv.FormatInt(res.Offset, 10))
	h.Set("Upload-Length", strconv.FormatInt(res.Length, 10))
	h.Set("Upload-Expires", res.Expires.UTC().Format(http.TimeFormat))
	h.Set("Cache-Control", "no-store")
	if res.MediaID != "" {
		h.Set("Media-Id", res.MediaID)
	}
}

// handleUploadOptions is tus's discovery: what this server supports, on
// /uploads and on an upload's own URL alike, without a token.
func (a *App) handleUploadOptions(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Tus-Version", tusVersion)
	h.Set("Tus-Extension", tusExtensions)
	h.Set("Tus-Max-Size", strconv.FormatInt(a.cfg.MaxMediaBytes, 10))
	h.Set("Tus-Checksum-Algorithm", "sha1,sha256")
	w.WriteHeader(http.StatusNoContent)
}

// handleUploadCreate creates an upload of Upload-Length bytes, checked at
// once against NAH_MAX_MEDIA_BYTES and the quota.
func (a *App) handleUploadCreate(w http.ResponseWriter, r *http.Request) {
	if !a.tusCheck(w, r) {
		return
	}
	me := sessionOf(r).person.ID
	if r.Header.Get("Upload-Concat") != "" {
		// Partial uploads would each become a media, and the final one
		// would name them: refused before anything is kept.
		a.writeError(w, r, nah.Errorf(nah.Invalid, "concatenation_unsupported", "this server does not join uploads (tus's Upload-Concat): send the file as one upload (tus-js-client: parallelUploads 1)"))
		return
	}
	if r.ContentLength != 0 || r.Header.Get("Upload-Defer-Length") != "" {
		w.Header().Set("Connection", "close") // the body is not read
		a.writeError(w, r, nah.Errorf(nah.Invalid, "invalid_upload_length", "declare the whole length in Upload-Length and send the bytes with PATCH (creation-with-upload and deferred lengths are not supported)"))
		return
	}
	length, ok := tusInt(r.Header.Get("Upload-Length"))
	if !ok {
		a.writeError(w, r, nah.Errorf(nah.Invalid, "invalid_upload_length", "Upload-Length is the file's size in bytes, at least 1"))
		return
	}
	if length == 0 {
		a.writeError(w, r, store.ErrEmptyMedia())
		return
	}
	if length > a.cfg.MaxMediaBytes {
		a.writeError(w, r, nah.Errorf(nah.TooLarge, "body_too_large", "a media file is at most %d bytes", a.cfg.MaxMediaBytes))
		return
	}
	meta := r.Header.Get("Upload-Metadata")
	spec, err := uploadMetadata(meta)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	spec.Length = length
	if spec.Idem, err = idemOf(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	if spec.Idem != nil {
		spec.Idem.Hash = idemHash("POST /uploads", []byte(strconv.FormatInt(length, 10)), []byte(meta))
	}
	res, replayed, err := a.store.Resumables().Create(r.Context(), me, spec, a.cfg.QuotaBytes)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Location", "/api/v1/uploads/"+res.ID)
	h.Set("Upload-Expires", res.Expires.UTC().Format(http.TimeFormat))
	if replayed {
		h.Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, http.StatusCreated, uploadJSONOf(res))
}

func uploadJSONOf(res store.Resumable) uploadJSON {
	out := uploadJSON{ID: res.ID, Length: res.Length, Offset: res.Offset, ExpiresAt: nah.FormatTime(res.Expires.UnixMilli()), MediaID: res.MediaID}
	if !res.Created.IsZero() {
		out.CreatedAt = nah.FormatTime(res.Created.UnixMilli())
	}
	return out
}

// tusInt reads Upload-Length and Upload-Offset: tus's non-negative
// integers are digits only, so "+5" or " 5" is refused, as tusd does.
func tusInt(v string) (int64, bool) {
	if v == "" || strings.Trim(v, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil
}

// handleUploadList lists the signed-in person's unfinished uploads with
// their metadata: a phone whose creation's answer was lost finds the
// upload here, and resumes or deletes it.
func (a *App) handleUploadList(w http.ResponseWriter, r *http.Request) {
	list, err := a.store.Resumables().List(r.Context(), sessionOf(r).person.ID)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := struct {
		Uploads []uploadJSON `json:"uploads"`
	}{Uploads: []uploadJSON{}}
	for _, res := range list {
		j := uploadJSONOf(res)
		j.Metadata = res.Metadata
		out.Uploads = append(out.Uploads, j)
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}

// uploadMetadata reads tus's Upload-Metadata: comma-separated "key
// base64-value" pairs. Known keys: filetype or content_type (the media
// type kept), sha256 (of the whole file, hex, checked at the end); others
// are kept and given back.
func uploadMetadata(v string) (store.ResumableSpec, error) {
	bad := func(why string) (store.ResumableSpec, error) {
		return store.ResumableSpec{}, nah.Errorf(nah.Invalid, "invalid_upload_metadata", "Upload-Metadata: %s", why)
	}
	spec := store.ResumableSpec{ContentType: "application/octet-stream", Metadata: v}
	if len(v) > maxUploadMetadata {
		return bad("at most " + strconv.Itoa(maxUploadMetadata) + " bytes")
	}
	seen := map[string]bool{}
	for pair := range strings.SplitSeq(v, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" && v == "" {
			break
		}
		key, val, _ := strings.Cut(pair, " ")
		if key == "" || seen[key] || strings.ContainsAny(key, " ,") {
			return bad("want comma-separated \"key base64-value\" pairs, each key once")
		}
		seen[key] = true
		b, err := base64.StdEncoding.Strict().DecodeString(val)
		if err != nil {
			return bad("the value of " + key + " is not base64")
		}
		switch key {
		case "filetype", "content_type":
			ct, err := mediaType(string(b))
			if err != nil {
				return store.ResumableSpec{}, err
			}
			spec.ContentType = ct
		case "sha256":
			s := strings.ToLower(string(b))
			if d, err := hex.DecodeString(s); err != nil || len(d) != sha256.Size {
				return bad("sha256 is the file's sha256 in 64 hex digits, base64-encoded as every value")
			}
			spec.SHA256 = s
		}
	}
	return spec, nil
}

// handleUploadHead says where an upload got to.
func (a *App) handleUploadHead(w http.ResponseWriter, r *http.Request) {
	if !a.tusCheck(w, r) {
		return
	}
	res, err := a.store.Resumables().Of(r.Context(), sessionOf(r).person.ID, pathParam(r, "upload_id"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	uploadHeaders(w, res)
	if res.Metadata != "" {
		w.Header().Set("Upload-Metadata", res.Metadata)
	}
	w.WriteHeader(http.StatusOK)
}

// errTakenOver ends a piece that a newer one for the same upload stopped.
var errTakenOver = errors.New("a newer piece took the upload over")

// handleUploadPatch appends the body at Upload-Offset, streamed to disk
// at the paced rate (Transfer); a piece cut off keeps what arrived.
func (a *App) handleUploadPatch(w http.ResponseWriter, r *http.Request) {
	if !a.tusCheck(w, r) {
		return
	}
	me, uid := sessionOf(r).person.ID, pathParam(r, "upload_id")
	if ct := r.Header.Get("Content-Type"); ct != "application/offset+octet-stream" {
		w.Header().Set("Connection", "close")
		a.writeError(w, r, nah.Errorf(nah.UnsupportedMediaType, "", "a piece is sent as Content-Type: application/offset+octet-stream"))
		return
	}
	offset, ok := tusInt(r.Header.Get("Upload-Offset"))
	if !ok {
		w.Header().Set("Connection", "close")
		a.writeError(w, r, nah.Errorf(nah.Invalid, "invalid_upload_offset", "Upload-Offset is where the piece starts, in bytes (HEAD gives it)"))
		return
	}
	piece := store.Piece{Offset: offset}
	var err error
	if c := r.Header.Get("Upload-Checksum"); c != "" {
		if piece.Checksum, piece.Want, err = uploadChecksum(c); err != nil {
			w.Header().Set("Connection", "close")
			a.writeError(w, r, err)
			return
		}
	}
	res, err := a.store.Resumables().Of(r.Context(), me, uid)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if rest := res.Length - offset; r.ContentLength > rest && res.MediaID == "" && offset == res.Offset {
		w.Header().Set("Connection", "close")
		uploadHeaders(w, res)
		a.writeError(w, r, nah.Errorf(nah.TooLarge, "piece_too_large", "the piece runs past the upload's length of %d bytes", res.Length))
		return
	}
	if err := a.takeOrOverloaded(transferCost); err != nil {
		a.writeError(w, r, err)
		return
	}
	defer a.mem.give(transferCost)

	start := time.Now()
	rc := http.NewResponseController(w)
	rest := max(res.Length-offset, 0)
	rc.SetWriteDeadline(a.cfg.Transfer.deadline(start, rest).Add(writeTimeout))
	var stopped atomic.Bool
	body := &pacedReader{r: r.Body, rc: rc, t: a.cfg.Transfer, start: start, stopped: &stopped}
	piece.Body = body
	piece.Stop = func() {
		stopped.Store(true)
		rc.SetReadDeadline(time.Now())
	}
	res, err = a.store.Resumables().Write(r.Context(), me, uid, piece)
	if res.ID != "" {
		uploadHeaders(w, res)
	}
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case body.err != nil && body.err != io.EOF && errors.Is(err, body.err):
		// Stalled, gone, or taken over by a newer piece: what arrived is
		// kept, and no one is there to read an answer.
		panic(http.ErrAbortHandler)
	default:
		a.writeError(w, r, err)
	}
}

// uploadChecksum reads tus's Upload-Checksum: "sha1 <base64>" or "sha256
// <base64>" of the piece.
func uploadChecksum(v string) (hash.Hash, []byte, error) {
	alg, sum, _ := strings.Cut(v, " ")
	want, err := base64.StdEncoding.Strict().DecodeString(sum)
	var h hash.Hash
	switch alg {
	case "sha1":
		h = sha1.New()
	case "sha256":
		h = sha256.New()
	default:
		return nil, nil, nah.Errorf(nah.Invalid, "checksum_algorithm", "Upload-Checksum takes sha1 or sha256")
	}
	if err != nil || len(want) != h.Size() {
		return nil, nil, nah.Errorf(nah.Invalid, "invalid_upload_checksum", "Upload-Checksum is the algorithm, a space and the piece's %s in base64", alg)
	}
	return h, want, nil
}

// handleUploadDelete abandons an upload; a finished one's media stays.
func (a *App) handleUploadDelete(w http.ResponseWriter, r *http.Request) {
	if !a.tusCheck(w, r) {
		return
	}
	if err := a.store.Resumables().Delete(r.Context(), sessionOf(r).person.ID, pathParam(r, "upload_id")); err != nil {
		a.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
