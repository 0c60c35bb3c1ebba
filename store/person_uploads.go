package store

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nah-app/nah"
)

// Resumable uploads (app/uploads.go speaks tus 1.0 over them): the bytes go
// to people/<id>/uploads/<uid>, the state (length, hash state, expiry) to
// <uid>.json beside them. The declared length counts against the quota from
// the creation on, so unfinished uploads together never pass it. The last
// piece renames the file into media/ and commits its row, as Commit does;
// the finished state is kept until it expires, so that a client whose last
// answer was lost learns the media's id.

const (
	// MaxResumables bounds a person's unfinished uploads; one more is 413
	// too_many_uploads, which tus clients do not retry as they do a 409.
	MaxResumables = 4
	// maxFinished bounds the finished uploads' states a person keeps (a
	// few hundred bytes each); past it the oldest goes before its expiry.
	maxFinished = 16
	// DefaultUploadExpiry is how long an upload lives after its creation
	// or its last piece (NAH_UPLOAD_EXPIRY).
	DefaultUploadExpiry = 24 * time.Hour
	// EmptyUploadExpiry is how long an upload that has no byte yet lives:
	// a creation whose 201 was lost (tus clients send no Idempotency-Key)
	// holds its quota and one of MaxResumables for minutes, not a day.
	EmptyUploadExpiry = 10 * time.Minute
	// takeOverWait bounds how long a piece waits for the one it takes over
	// (a connection the client dropped) to stop.
	takeOverWait = 10 * time.Second
)

// ResumableSpec is what a creation declares.
type ResumableSpec struct {
	Length      int64
	ContentType string
	SHA256      string // of the whole file, lowercase hex; "" if not declared
	Metadata    string // the Upload-Metadata header as sent, given back on HEAD
	Idem        *Idem  // Key and Hash only; nil without Idempotency-Key
}

// Resumable is what a client may know of an upload.
type Resumable struct {
	ID          string
	Length      int64
	Offset      int64
	ContentType string
	Metadata    string
	Created     time.Time // zero for an upload created before it was kept
	Expires     time.Time
	MediaID     string // set once finished
}

// resumableState is an upload's <uid>.json.
type resumableState struct {
	Length      int64  `json:"length"`
	ContentType string `json:"content_type"`
	SHA256      string `json:"sha256,omitempty"`
	Metadata    string `json:"metadata,omitempty"`
	IdemKey     string `json:"idem_key,omitempty"`
	IdemHash    []byte `json:"idem_hash,omitempty"`
	Created     int64  `json:"created,omitempty"` // unix ms
	Expires     int64  `json:"expires"`           // unix ms
	// Hashed is how many bytes Hash, sha256's marshalled state, has read;
	// the file may hold more (a crash after a write), read again on resume.
	Hashed  int64  `json:"hashed"`
	Hash    []byte `json:"hash,omitempty"`
	MediaID string `json:"media_id,omitempty"`
}

// resumable is a live upload. busy is held by the one request writing or
// removing it; st's Hashed and Hash, h and f belong to busy's holder, the
// rest to the person's usage lock.
type resumable struct {
	id     string
	busy   chan struct{}
	st     resumableState
	offset atomic.Int64 // bytes in the file, for HEAD
	h      hash.Hash    // at offset; nil until the first piece since load
	stop   func()       // stops the piece holding busy, for a newer one
	gone   bool
}

func (r *resumable) snapshot() Resumable {
	out := Resumable{ID: r.id, Length: r.st.Length, Offset: r.offset.Load(), ContentType: r.st.ContentType,
		Metadata: r.st.Metadata, Expires: time.UnixMilli(r.st.Expires).UTC(), MediaID: r.st.MediaID}
	if r.st.Created != 0 {
		out.Created = time.UnixMilli(r.st.Created).UTC()
	}
	return out
}

// expiryAt is when an upload at offset expires if nothing more arrives:
// EmptyUploadExpiry while it has no byte, NAH_UPLOAD_EXPIRY after.
func (s *Store) expiryAt(offset int64) int64 {
	d := s.uploadExpiry
	if offset == 0 {
		d = min(d, EmptyUploadExpiry)
	}
	return s.now().Add(d).UnixMilli()
}

// ValidUploadID reports whether id has an upload id's shape: 32 lowercase hex.
func ValidUploadID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func errNoUpload() error {
	return nah.Errorf(nah.NotFound, "", "no such upload (finished uploads are kept until they expire)")
}

// ErrOffsetMismatch is a piece sent at another offset than the upload's.
func ErrOffsetMismatch(at int64) error {
	return nah.Errorf(nah.Conflict, "offset_mismatch", "the upload is at offset %d: send the piece from there (HEAD gives it)", at)
}

func (s *Store) uploadsDir(id string) (string, error) {
	d, err := s.personDir(id)
	if err != nil {
		return "", err
	}
	return filepath.Join(d, nah.UploadsDirName), nil
}

// loadResumables reads person id's uploads folder into u, removing the
// expired uploads and what a crash left half made. u.mu is held.
func (s *Store) loadResumables(id string, u *mediaUsage) {
	u.resumables = make(map[string]*resumable)
	dir, _ := s.uploadsDir(id)
	es, err := os.ReadDir(dir)
	if err != nil {
		return // none yet
	}
	now := s.now().UnixMilli()
	states := make(map[string]bool)
	for _, e := range es {
		uid, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !ValidUploadID(uid) {
			continue
		}
		var st resumableState
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil {
			err = json.Unmarshal(b, &st)
		}
		data, derr := os.Stat(filepath.Join(dir, uid))
		if err != nil || st.Expires <= now || (st.MediaID == "" && derr != nil) {
			removeUpload(dir, uid)
			continue
		}
		r := &resumable{id: uid, busy: make(chan struct{}, 1), st: st}
		if st.MediaID == "" {
			r.offset.Store(min(data.Size(), st.Length))
			u.staged += nah.MediaCharge(st.Length)
		} else {
			r.offset.Store(st.Length)
		}
		u.resumables[uid] = r
		states[uid] = true
	}
	for _, e := range es { // bytes or temporary states without a state
		name := e.Name()
		uid := strings.TrimSuffix(name, ".json.tmp")
		if !states[uid] && (ValidUploadID(uid) || strings.HasSuffix(name, ".json.tmp")) {
			os.Remove(filepath.Join(dir, name))
		}
	}
	if len(u.resumables) > 0 {
		s.uploaders.Store(id, true)
	}
}

func removeUpload(dir, uid string) {
	os.Remove(filepath.Join(dir, uid))
	os.Remove(filepath.Join(dir, uid+".json"))
}

// saveState writes r's state to its <uid>.json by a rename, so that it is
// whole or the previous one. It is not fsynced: a lost state is an older
// one, and a resume reads the file's bytes past its Hashed again.
func saveState(dir string, r *resumable) error {
	b, err := json.Marshal(r.st)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, r.id+".json.tmp")
	if err := os.WriteFile(tmp, b, privateFile); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, r.id+".json"))
}

// Resumables are the people's resumable uploads (tus): the bytes beside
// their media, the state in a file each.
type Resumables struct{ s *Store }

// Resumables returns the store's resumable uploads.
func (s *Store) Resumables() Resumables { return Resumables{s} }

// Create starts an upload of spec.Length bytes for owner, whose storage
// with every unfinished upload at its declared length may not pass quota;
// with an Idempotency-Key used before, it returns that upload.
func (rs Resumables) Create(ctx context.Context, owner string, spec ResumableSpec, quota int64) (Resumable, bool, error) {
	s := rs.s
	if spec.Length < 1 {
		return Resumable{}, false, ErrEmptyMedia()
	}
	dir, err := s.uploadsDir(owner)
	if err != nil {
		return Resumable{}, false, err
	}
	base, err := s.databaseBytes(owner)
	if err != nil {
		return Resumable{}, false, nah.ErrNoPerson()
	}
	var out Resumable
	replayed := false
	err = s.withUsage(ctx, owner, func(u *mediaUsage) error {
		s.expireResumables(owner, u)
		unfinished := 0
		for _, r := range u.resumables {
			if spec.Idem != nil && r.st.IdemKey == spec.Idem.Key {
				if !bytes.Equal(r.st.IdemHash, spec.Idem.Hash) {
					return ErrIdemReused()
				}
				out, replayed = r.snapshot(), true
				return nil
			}
			if r.st.MediaID == "" {
				unfinished++
			}
		}
		if unfinished >= MaxResumables {
			return nah.Errorf(nah.QuotaExceeded, "too_many_uploads", "you have %d unfinished uploads: finish or delete one first (GET /api/v1/uploads lists them)", unfinished)
		}
		if u.count+u.uploading+unfinished >= nah.MaxMediaCount {
			return errTooManyMedia()
		}
		if base+u.charged+u.pending+u.staged+nah.MediaCharge(spec.Length) > quota {
			return nah.Errorf(nah.QuotaExceeded, "", "this upload would take your storage past your quota of %d bytes (unfinished uploads count at their full length, a file at least %d bytes): delete some media first", quota, nah.MediaChargeBytes)
		}
		if err := os.Mkdir(dir, privateDir); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		var b [16]byte
		rand.Read(b[:])
		r := &resumable{id: hex.EncodeToString(b[:]), busy: make(chan struct{}, 1), h: sha256.New()}
		r.st = resumableState{Length: spec.Length, ContentType: spec.ContentType, SHA256: spec.SHA256, Metadata: spec.Metadata,
			Created: s.now().UnixMilli(), Expires: s.expiryAt(0)}
		if spec.Idem != nil {
			r.st.IdemKey, r.st.IdemHash = spec.Idem.Key, spec.Idem.Hash
		}
		r.st.Hash, _ = r.h.(encoding.BinaryMarshaler).MarshalBinary()
		f, err := os.OpenFile(filepath.Join(dir, r.id), os.O_CREATE|os.O_EXCL|os.O_WRONLY, privateFile)
		if err != nil {
			return err
		}
		f.Close()
		if err := saveState(dir, r); err != nil {
			removeUpload(dir, r.id)
			return err
		}
		u.resumables[r.id] = r
		u.staged += nah.MediaCharge(spec.Length)
		s.uploaders.Store(owner, true)
		out = r.snapshot()
		return nil
	})
	return out, replayed, s.spaceErr(err)
}

// Of returns owner's upload uid as it stands.
func (rs Resumables) Of(ctx context.Context, owner, uid string) (Resumable, error) {
	s := rs.s
	var out Resumable
	err := s.withUsage(ctx, owner, func(u *mediaUsage) error {
		r, err := s.liveResumable(owner, u, uid)
		if err == nil {
			out = r.snapshot()
		}
		return err
	})
	return out, err
}

// List returns owner's unfinished uploads, oldest first, so that a phone
// that lost a creation's answer can find the upload and delete it.
func (rs Resumables) List(ctx context.Context, owner string) ([]Resumable, error) {
	s := rs.s
	var out []Resumable
	err := s.withUsage(ctx, owner, func(u *mediaUsage) error {
		s.expireResumables(owner, u)
		for _, r := range u.resumables {
			if r.st.MediaID == "" {
				out = append(out, r.snapshot())
			}
		}
		return nil
	})
	slices.SortFunc(out, func(a, b Resumable) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.ID, b.ID))
	})
	return out, err
}

// liveResumable is u's upload uid unless it expired (then removed). u.mu
// is held.
func (s *Store) liveResumable(owner string, u *mediaUsage, uid string) (*resumable, error) {
	r := u.resumables[uid]
	if r == nil || !ValidUploadID(uid) {
		return nil, errNoUpload()
	}
	if r.st.Expires <= s.now().UnixMilli() {
		s.expireResumables(owner, u)
		if r.gone {
			return nil, errNoUpload()
		}
	}
	return r, nil
}

// expireResumables removes owner's expired uploads that no request holds,
// giving their length back to the quota. u.mu is held.
func (s *Store) expireResumables(owner string, u *mediaUsage) {
	dir, _ := s.uploadsDir(owner)
	now := s.now().UnixMilli()
	for uid, r := range u.resumables {
		if r.st.Expires > now {
			continue
		}
		select {
		case r.busy <- struct{}{}:
		default:
			continue // a piece is arriving: its end moves the expiry on
		}
		s.dropResumable(dir, u, r)
		<-r.busy
		s.log.Info("removed an expired upload", "person", owner, "upload", uid)
	}
}

// dropResumable removes r's files and gives its length back. u.mu and
// r.busy are held.
func (s *Store) dropResumable(dir string, u *mediaUsage, r *resumable) {
	removeUpload(dir, r.id)
	delete(u.resumables, r.id)
	if r.st.MediaID == "" {
		u.staged -= nah.MediaCharge(r.st.Length)
	}
	r.gone = true
}

// Sweep removes the expired uploads of everyone who has some.
func (rs Resumables) Sweep(ctx context.Context) {
	s := rs.s
	s.uploaders.Range(func(k, _ any) bool {
		id := k.(string)
		err := s.withUsage(ctx, id, func(u *mediaUsage) error {
			s.expireResumables(id, u)
			if len(u.resumables) == 0 {
				s.uploaders.Delete(id)
			}
			return nil
		})
		if err != nil {
			s.uploaders.Delete(id) // deleted meanwhile: the folder went with them
		}
		return true
	})
}

// sweepExpiredAtStart finds, once at start, the people with uploads on
// disk, and removes the expired ones.
func (s *Store) sweepExpiredAtStart(ctx context.Context) {
	dirs, _ := filepath.Glob(filepath.Join(s.dir, filepath.FromSlash(nah.UploadsDirsPattern)))
	for _, d := range dirs {
		s.uploaders.Store(filepath.Base(filepath.Dir(d)), true)
	}
	s.Resumables().Sweep(ctx)
}

// takeResumable holds owner's upload uid for one request, stopping the one that
// holds it (a piece on a connection the client has left) and waiting for
// it up to takeOverWait. stop, if not nil, is how a later one stops this.
func (s *Store) takeResumable(ctx context.Context, owner, uid string, stop func()) (*resumable, *mediaUsage, error) {
	var r *resumable
	var u *mediaUsage
	err := s.withUsage(ctx, owner, func(uu *mediaUsage) (err error) {
		u = uu
		r, err = s.liveResumable(owner, u, uid)
		if err == nil && r.stop != nil {
			r.stop()
		}
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	t := time.NewTimer(takeOverWait)
	defer t.Stop()
	select {
	case r.busy <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	case <-t.C:
		e := nah.Errorf(nah.Conflict, "upload_busy", "another request is still sending to this upload")
		e.RetryAfter = time.Second
		return nil, nil, e
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if r.gone {
		<-r.busy
		return nil, nil, errNoUpload()
	}
	r.stop = stop
	return r, u, nil
}

func (s *Store) releaseResumable(u *mediaUsage, r *resumable) {
	u.mu.Lock()
	r.stop = nil
	u.mu.Unlock()
	<-r.busy
}

// Delete abandons owner's upload uid: its files go and its length is given
// back to the quota. A finished one's media stays.
func (rs Resumables) Delete(ctx context.Context, owner, uid string) error {
	s := rs.s
	r, u, err := s.takeResumable(ctx, owner, uid, nil)
	if err != nil {
		return err
	}
	defer func() { <-r.busy }()
	dir, _ := s.uploadsDir(owner)
	u.mu.Lock()
	defer u.mu.Unlock()
	r.stop = nil
	s.dropResumable(dir, u, r)
	return nil
}

// unfinished counts u's resumable uploads not yet a media. u.mu is held.
func (u *mediaUsage) unfinished() int {
	n := 0
	for _, r := range u.resumables {
		if r.st.MediaID == "" {
			n++
		}
	}
	return n
}
