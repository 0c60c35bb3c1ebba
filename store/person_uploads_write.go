package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/nah-app/nah"
)

// Piece is one PATCH of an upload.
type Piece struct {
	Offset int64
	Body   io.Reader
	// Checksum, when set, hashes the piece (tus's Upload-Checksum): a
	// piece whose sum is not Want, or that was cut off, is dropped whole.
	Checksum hash.Hash
	Want     []byte
	// Stop makes Body's reads fail soon: a newer piece for the same upload
	// calls it, the client having left this one.
	Stop func()
}

// ErrChecksumMismatch is a piece, or a whole upload, whose sum is not the
// one declared.
func ErrChecksumMismatch(whole bool) error {
	if whole {
		return nah.Errorf(nah.ChecksumMismatch, "upload_checksum_mismatch", "the file's sha256 is not the one declared at the creation: the upload was deleted, create it again")
	}
	return nah.Errorf(nah.ChecksumMismatch, "checksum_mismatch", "the piece's Upload-Checksum does not match its bytes: the piece was dropped, send it again")
}

var pieceBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// Write appends p to owner's upload uid, streamed to its file through one
// 32 KiB buffer, and fsyncs it; the last piece makes it a media. What was
// written of a piece cut off is kept (without Checksum) and the body's
// error returned; the state returned is the upload's after.
func (rs Resumables) Write(ctx context.Context, owner, uid string, p Piece) (Resumable, error) {
	s := rs.s
	r, u, err := s.takeResumable(ctx, owner, uid, p.Stop)
	if err != nil {
		return Resumable{}, err
	}
	defer s.releaseResumable(u, r)
	dir, _ := s.uploadsDir(owner)
	at := r.offset.Load()
	if r.st.MediaID != "" {
		// As tusd: an empty piece at the end of a finished upload is a
		// success (a client whose last answer was lost may send one).
		var one [1]byte
		if _, err := io.ReadFull(p.Body, one[:]); err == io.EOF && p.Offset == at {
			return r.snapshot(), nil
		}
		return r.snapshot(), nah.Errorf(nah.Conflict, "offset_mismatch", "the upload is finished, %d bytes long, as media %s: it takes no more bytes", at, r.st.MediaID)
	}
	if p.Offset != at {
		return r.snapshot(), ErrOffsetMismatch(at)
	}
	f, err := os.OpenFile(filepath.Join(dir, uid), os.O_WRONLY, 0)
	if err != nil {
		return r.snapshot(), s.spaceErr(err)
	}
	defer f.Close()
	if err := s.resumeHash(f, r, at); err != nil {
		return r.snapshot(), err
	}
	if _, err := f.Seek(at, io.SeekStart); err != nil {
		return r.snapshot(), err
	}
	before := mustMarshal(r.h)
	buf := pieceBuffers.Get().(*[]byte)
	// One byte past the length is read, to refuse a piece that runs over.
	n, rerr, werr := copyPiece(f, io.LimitReader(p.Body, r.st.Length-at+1), *buf, r, p.Checksum)
	pieceBuffers.Put(buf)
	serr := f.Sync()
	over := r.offset.Load() > r.st.Length
	if over || (p.Checksum != nil && (rerr != nil || werr != nil || serr != nil || !bytes.Equal(p.Checksum.Sum(nil), p.Want))) {
		// Dropped whole: the file and the hash go back to the piece's start.
		f.Truncate(at)
		r.h.(encoding.BinaryUnmarshaler).UnmarshalBinary(before)
		r.offset.Store(at)
		n = 0
		switch {
		case over:
			rerr = nah.Errorf(nah.TooLarge, "piece_too_large", "the piece runs past the upload's length of %d bytes: it was dropped", r.st.Length)
		case rerr == nil && werr == nil && serr == nil:
			rerr = ErrChecksumMismatch(false)
		}
	}
	if werr == nil {
		werr = serr
	}
	if werr != nil { // the disk: keep only what was fsynced before
		f.Truncate(at)
		r.h, n = nil, 0
		r.offset.Store(at)
	}
	if n > 0 {
		r.st.Hashed, r.st.Hash = r.offset.Load(), mustMarshal(r.h)
	}
	u.mu.Lock()
	r.st.Expires = s.expiryAt(r.offset.Load())
	u.mu.Unlock()
	if err := saveState(dir, r); err != nil && werr == nil {
		werr = err
	}
	switch {
	case werr != nil:
		return r.snapshot(), s.spaceErr(werr)
	case rerr != nil:
		return r.snapshot(), rerr
	case r.offset.Load() < r.st.Length:
		return r.snapshot(), nil
	}
	return s.finishResumable(ctx, owner, dir, u, r)
}

func mustMarshal(h hash.Hash) []byte {
	b, _ := h.(encoding.BinaryMarshaler).MarshalBinary()
	return b
}

// resumeHash makes r.h the sha256 of the file's first at bytes: from the
// saved state, reading again what was written past it.
func (s *Store) resumeHash(f *os.File, r *resumable, at int64) error {
	if r.h != nil {
		return nil
	}
	h := sha256.New()
	from := int64(0)
	if r.st.Hashed <= at && h.(encoding.BinaryUnmarshaler).UnmarshalBinary(r.st.Hash) == nil {
		from = r.st.Hashed
	} else {
		h.Reset()
	}
	rf, err := os.Open(f.Name())
	if err != nil {
		return err
	}
	defer rf.Close()
	if _, err := io.Copy(h, io.NewSectionReader(rf, from, at-from)); err != nil {
		return err
	}
	if err := f.Truncate(at); err != nil { // past the length: never written by us
		return err
	}
	r.h = h
	return nil
}

// copyPiece copies src to f through buf, hashing into r.h and sum; rerr
// is src's error (not io.EOF), werr the file's.
func copyPiece(f *os.File, src io.Reader, buf []byte, r *resumable, sum hash.Hash) (n int64, rerr, werr error) {
	for {
		nr, err := src.Read(buf)
		if nr > 0 {
			nw, ew := f.Write(buf[:nr])
			r.h.Write(buf[:nw])
			if sum != nil {
				sum.Write(buf[:nw])
			}
			n += int64(nw)
			r.offset.Add(int64(nw))
			if ew != nil {
				return n, nil, ew
			}
		}
		if err == io.EOF {
			return n, nil, nil
		}
		if err != nil {
			return n, err, nil
		}
	}
}

// finishResumable checks the whole file's sha256, then makes it a media:
// renamed into media/, both folders fsynced, its row committed; the state
// is kept, with the media's id, until it expires. r.busy is held.
func (s *Store) finishResumable(ctx context.Context, owner, dir string, u *mediaUsage, r *resumable) (Resumable, error) {
	sum := hex.EncodeToString(r.h.Sum(nil))
	u.mu.Lock()
	defer u.mu.Unlock()
	if r.st.Length < 1 { // a state from before creations were checked
		s.dropResumable(dir, u, r)
		return r.snapshot(), ErrEmptyMedia()
	}
	if r.st.SHA256 != "" && r.st.SHA256 != sum {
		s.dropResumable(dir, u, r)
		return r.snapshot(), ErrChecksumMismatch(true)
	}
	// The creation counted this upload against nah.MaxMediaCount; a
	// count passed meanwhile (a restored copy's rows) keeps it unfinished.
	if u.count+u.uploading >= nah.MaxMediaCount {
		return r.snapshot(), errTooManyMedia()
	}
	mdir, _ := s.mediaDir(owner)
	if err := os.Mkdir(mdir, privateDir); err != nil && !errors.Is(err, fs.ErrExist) {
		return r.snapshot(), s.spaceErr(err)
	}
	now := s.now().UnixMilli()
	m := nah.Media{ID: nah.NewMediaID(now), Owner: owner, Size: r.st.Length, SHA256: sum, ContentType: r.st.ContentType, CreatedAt: now}
	final := filepath.Join(mdir, m.ID)
	err := os.Rename(filepath.Join(dir, r.id), final)
	if err == nil {
		err = syncDir(mdir)
	}
	if err == nil {
		err = s.useFile(ctx, owner, true, func(f *personFile) error {
			_, err := f.db.ExecContext(ctx, `INSERT INTO media(id, size, sha256, content_type, created_at) VALUES (?, ?, ?, ?, ?)`,
				m.ID, m.Size, m.SHA256, m.ContentType, m.CreatedAt)
			return err
		})
		if err != nil {
			os.Rename(final, filepath.Join(dir, r.id)) // a retry of the last piece's end finds it again
		}
	}
	if err != nil {
		return r.snapshot(), s.spaceErr(err)
	}
	u.staged -= nah.MediaCharge(r.st.Length)
	u.bytes += m.Size
	u.charged += nah.MediaCharge(m.Size)
	u.count++
	r.st.MediaID, r.st.Hash = m.ID, nil
	r.st.Expires = s.now().Add(s.uploadExpiry).UnixMilli()
	if err := saveState(dir, r); err != nil {
		s.log.Warn("keep a finished upload's state", "person", owner, "upload", r.id, "err", err)
	}
	syncDir(dir)
	s.trimFinished(dir, u, r)
	s.addedMedia(owner)
	return r.snapshot(), nil
}

// trimFinished drops the oldest finished states past maxFinished, except
// keep's. u.mu is held.
func (s *Store) trimFinished(dir string, u *mediaUsage, keep *resumable) {
	var done []*resumable
	for _, r := range u.resumables {
		if r.st.MediaID != "" && r != keep {
			done = append(done, r)
		}
	}
	for len(done) >= maxFinished {
		oldest := 0
		for i, r := range done {
			if r.st.MediaID < done[oldest].st.MediaID { // media ids sort by time
				oldest = i
			}
		}
		select {
		case done[oldest].busy <- struct{}{}:
			s.dropResumable(dir, u, done[oldest])
			<-done[oldest].busy
		default:
		}
		done = append(done[:oldest], done[oldest+1:]...)
	}
}
