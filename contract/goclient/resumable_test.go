package goclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/nah-app/nah/contract/goclient/nahclient"
)

// cutReader gives the first n bytes of b, then blocks until the request
// is cancelled: a phone's connection that drops mid-piece.
type cutReader struct {
	b    []byte
	n    int
	sent chan struct{}
	ctx  context.Context
}

func (r *cutReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		<-r.ctx.Done()
		return 0, r.ctx.Err()
	}
	k := copy(p, r.b[:r.n])
	r.b, r.n = r.b[k:], r.n-k
	if r.n == 0 {
		close(r.sent)
	}
	return k, nil
}

// TestPhoneResumableUpload is a phone's large upload over tus 1.0 with the
// generated client only: a piece cut off mid-way, HEAD for where the
// server got to, the rest from there, the file read back equal; and an
// upload abandoned, which is then gone.
func TestPhoneResumableUpload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	base := server(t)
	ana := signUp(t, ctx, base, "ana")

	file := make([]byte, 3<<20)
	for i := range file {
		file[i] = byte(i*31 + i>>13)
	}
	sum := sha256.Sum256(file)
	hexSum := hex.EncodeToString(sum[:])
	meta := "filetype " + base64.StdEncoding.EncodeToString([]byte("video/mp4")) +
		",sha256 " + base64.StdEncoding.EncodeToString([]byte(hexSum))
	tus := nahclient.CreateUploadParamsTusResumableN100
	created, err := ana.CreateUploadWithResponse(ctx, &nahclient.CreateUploadParams{
		TusResumable: tus, UploadLength: len(file), UploadMetadata: &meta,
	})
	if err != nil || created.JSON201 == nil {
		t.Fatalf("create upload: %v %d %s", err, created.StatusCode(), created.Body)
	}
	id := created.JSON201.Id
	if created.JSON201.Offset != 0 || created.JSON201.Length != len(file) {
		t.Fatalf("created %+v, want offset 0 and length %d", *created.JSON201, len(file))
	}

	// The first piece is cut off after 1 MiB has gone out.
	sent := 1 << 20
	pctx, pcancel := context.WithCancel(ctx)
	cr := &cutReader{b: file, n: sent, sent: make(chan struct{}), ctx: pctx}
	done := make(chan error, 1)
	go func() {
		res, err := ana.PatchUploadWithBodyWithResponse(pctx, id, &nahclient.PatchUploadParams{
			TusResumable: nahclient.PatchUploadParamsTusResumableN100, UploadOffset: 0,
		}, "application/offset+octet-stream", io.NopCloser(cr))
		if err == nil {
			t.Errorf("the cut piece was answered %d %s", res.StatusCode(), res.Body)
		}
		done <- err
	}()
	<-cr.sent
	// Let the server write what arrived before the connection goes.
	offset := 0
	for range 100 {
		head, err := ana.HeadUploadWithResponse(ctx, id, &nahclient.HeadUploadParams{TusResumable: nahclient.HeadUploadParamsTusResumableN100})
		if err != nil || head.Headers200 == nil || head.Headers200.UploadOffset == nil {
			t.Fatalf("head while the piece runs: %v %d", err, head.StatusCode())
		}
		if offset = *head.Headers200.UploadOffset; offset > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	pcancel()
	<-done

	head, err := ana.HeadUploadWithResponse(ctx, id, &nahclient.HeadUploadParams{TusResumable: nahclient.HeadUploadParamsTusResumableN100})
	if err != nil || head.Headers200 == nil || head.Headers200.UploadOffset == nil {
		t.Fatalf("head after the cut: %v %d", err, head.StatusCode())
	}
	offset = *head.Headers200.UploadOffset
	if offset <= 0 || offset > sent {
		t.Fatalf("after a cut at %d bytes the server has %d", sent, offset)
	}
	if head.Headers200.MediaId != nil {
		t.Fatalf("an unfinished upload has media %s", *head.Headers200.MediaId)
	}

	// A piece from the wrong offset is 409 with the server's offset, which
	// may have moved on since the HEAD: the cut piece's last bytes can still
	// be landing. The phone resumes from the offset of each 409.
	wrong, err := ana.PatchUploadWithBodyWithResponse(ctx, id, &nahclient.PatchUploadParams{
		TusResumable: nahclient.PatchUploadParamsTusResumableN100, UploadOffset: 0,
	}, "application/offset+octet-stream", bytes.NewReader(file[:10]))
	if err != nil || wrong.StatusCode() != http.StatusConflict || wrong.Headers409 == nil || wrong.Headers409.UploadOffset == nil {
		t.Fatalf("a piece at 0 when the server has %d: %v %d %s", offset, err, wrong.StatusCode(), wrong.Body)
	}
	if o := *wrong.Headers409.UploadOffset; o < offset || o > sent {
		t.Fatalf("409 says offset %d; HEAD said %d and %d bytes went out", o, offset, sent)
	}
	offset = *wrong.Headers409.UploadOffset

	// The rest, from where the server got to, finishes it.
	var rest *nahclient.PatchUploadResponse
	for try := 0; ; try++ {
		rest, err = ana.PatchUploadWithBodyWithResponse(ctx, id, &nahclient.PatchUploadParams{
			TusResumable: nahclient.PatchUploadParamsTusResumableN100, UploadOffset: offset,
		}, "application/offset+octet-stream", bytes.NewReader(file[offset:]))
		if err == nil && rest.Headers409 != nil && rest.Headers409.UploadOffset != nil && try < 5 {
			offset = *rest.Headers409.UploadOffset
			continue
		}
		break
	}
	if err != nil || rest.StatusCode() != http.StatusNoContent || rest.Headers204 == nil {
		t.Fatalf("resume at %d: %v %d %s", offset, err, rest.StatusCode(), rest.Body)
	}
	if h := rest.Headers204; h.UploadOffset == nil || *h.UploadOffset != len(file) || h.MediaId == nil {
		t.Fatalf("the last piece answered offset %v media %v, want %d and a media", h.UploadOffset, h.MediaId, len(file))
	}
	mediaID := *rest.Headers204.MediaId
	got, err := ana.GetMediaWithResponse(ctx, ana.id, mediaID, &nahclient.GetMediaParams{})
	if err != nil || got.StatusCode() != http.StatusOK {
		t.Fatalf("download the resumed upload: %v %d", err, got.StatusCode())
	}
	gotSum := sha256.Sum256(got.Body)
	if hex.EncodeToString(gotSum[:]) != hexSum || len(got.Body) != len(file) {
		t.Errorf("the resumed upload reads back %d bytes, sha256 %x; sent %d, %s", len(got.Body), gotSum, len(file), hexSum)
	}
	if ct := got.HTTPResponse.Header.Get("Content-Type"); ct != "video/mp4" {
		t.Errorf("the resumed upload is served as %q, declared video/mp4", ct)
	}

	// An upload abandoned is gone.
	other, err := ana.CreateUploadWithResponse(ctx, &nahclient.CreateUploadParams{TusResumable: tus, UploadLength: 1000})
	if err != nil || other.JSON201 == nil {
		t.Fatalf("create a second upload: %v %d %s", err, other.StatusCode(), other.Body)
	}
	del, err := ana.DeleteUploadWithResponse(ctx, other.JSON201.Id, &nahclient.DeleteUploadParams{TusResumable: nahclient.DeleteUploadParamsTusResumableN100})
	if err != nil || del.StatusCode() != http.StatusNoContent {
		t.Fatalf("abandon: %v %d %s", err, del.StatusCode(), del.Body)
	}
	after, err := ana.HeadUploadWithResponse(ctx, other.JSON201.Id, &nahclient.HeadUploadParams{TusResumable: nahclient.HeadUploadParamsTusResumableN100})
	if err != nil {
		t.Fatalf("head of an abandoned upload: %v", err)
	}
	if after.StatusCode() != http.StatusNotFound {
		t.Errorf("head of an abandoned upload: %d, want 404", after.StatusCode())
	}
}
