package goclient

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nah-app/nah/contract/goclient/nahclient"
)

// binary is the real nah server, built once from the repository root.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "nah-goclient")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "nah")
	build := exec.Command("go", "build", "-o", binary, "./cmd/nah")
	build.Dir = filepath.Join("..", "..")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build nah: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var listenRE = regexp.MustCompile(`listen=(\S+)`)

// server runs the binary on a fresh data directory with open sign-up and
// returns its base URL once it listens; the log is shown on failure.
func server(t *testing.T) string {
	t.Helper()
	data := t.TempDir()
	cmd := exec.Command(binary, "serve")
	cmd.Env = []string{
		"NAH_ADDR=127.0.0.1:0",
		"NAH_DATA_DIR=" + data,
		"NAH_REPLICA_URL=" + filepath.Join(t.TempDir(), "replica"),
		"NAH_OPEN_SIGNUP=true",
		"PATH=" + os.Getenv("PATH"),
	}
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var log bytes.Buffer
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addrc <- m[1]:
				default:
				}
			}
		}
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); pw.Close() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			mu.Lock()
			t.Logf("server log:\n%s", log.String())
			mu.Unlock()
		}
	})
	select {
	case addr := <-addrc:
		return "http://" + addr
	case err := <-done:
		t.Fatalf("server exited at start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("server did not start in 30 s")
	}
	return ""
}

// phone is a generated client signed in as one person.
type phone struct {
	*nahclient.ClientWithResponses
	id    string
	token string
}

func newClient(t *testing.T, base string, token *string) *nahclient.ClientWithResponses {
	t.Helper()
	c, err := nahclient.NewClientWithResponses(base,
		nahclient.WithHTTPClient(&http.Client{Timeout: 20 * time.Second}),
		nahclient.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			if token != nil && *token != "" {
				r.Header.Set("Authorization", "Bearer "+*token)
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// signUp makes an account through the generated client; a 503 (every
// hashing slot busy) is retried after its Retry-After, as an app would.
func signUp(t *testing.T, ctx context.Context, base, handle string) *phone {
	t.Helper()
	p := &phone{}
	p.ClientWithResponses = newClient(t, base, &p.token)
	for try := 0; ; try++ {
		res, err := p.SignUpWithResponse(ctx, nahclient.SignUp{Handle: handle, Password: "password-" + handle})
		if err != nil {
			t.Fatalf("sign up %s: %v", handle, err)
		}
		if res.StatusCode() == http.StatusServiceUnavailable && try < 20 {
			time.Sleep(time.Second)
			continue
		}
		if res.JSON201 == nil {
			t.Fatalf("sign up %s: %d %s", handle, res.StatusCode(), res.Body)
		}
		p.id, p.token = res.JSON201.Person.Id, res.JSON201.Token
		return p
	}
}

func ids(ms []nahclient.Moment) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Id
	}
	return out
}

// TestPhoneScenario is what a phone app does on a bad network, written
// only against the client oapi-codegen generates from openapi.json:
// retries that must not duplicate, refreshes that must be cheap, a device
// token with ':' in it, an export read as bytes and media read back.
func TestPhoneScenario(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	base := server(t)
	ana := signUp(t, ctx, base, "ana")
	rui := signUp(t, ctx, base, "rui")

	// ana invites rui, so rui's posts are in ana's feed.
	inv, err := ana.CreateInviteWithResponse(ctx)
	if err != nil || inv.JSON201 == nil {
		t.Fatalf("invite: %v %d %s", err, inv.StatusCode(), inv.Body)
	}
	red, err := rui.RedeemInviteWithResponse(ctx, nahclient.Redeem{Code: inv.JSON201.Code})
	if err != nil || red.StatusCode() != http.StatusCreated {
		t.Fatalf("redeem: %v %d %s", err, red.StatusCode(), red.Body)
	}

	// A post and its retry with the same Idempotency-Key: the same answer,
	// one moment. The body is bytes that are not UTF-8.
	key := "3f1c8e0a-5b7d-4c2e-9a61-0d4b8f2e7c19"
	body := []byte{0xff, 0x00, 0xfe, 'h', 'i', 0x80}
	first, err := ana.PostMomentWithResponse(ctx, &nahclient.PostMomentParams{IdempotencyKey: &key}, nahclient.NewMoment{Body: body})
	if err != nil || first.JSON201 == nil {
		t.Fatalf("post: %v %d %s", err, first.StatusCode(), first.Body)
	}
	retry, err := ana.PostMomentWithResponse(ctx, &nahclient.PostMomentParams{IdempotencyKey: &key}, nahclient.NewMoment{Body: body})
	if err != nil || retry.JSON201 == nil {
		t.Fatalf("retry: %v %d %s", err, retry.StatusCode(), retry.Body)
	}
	if !bytes.Equal(retry.Body, first.Body) {
		t.Errorf("retry answered %s, the first %s", retry.Body, first.Body)
	}
	if got := retry.HTTPResponse.Header.Get("Idempotent-Replayed"); got != "true" {
		t.Errorf("retry's Idempotent-Replayed = %q, want true", got)
	}
	other, err := ana.PostMomentWithResponse(ctx, &nahclient.PostMomentParams{IdempotencyKey: &key}, nahclient.NewMoment{Body: []byte("another")})
	if err != nil || other.JSON422 == nil {
		t.Errorf("same key, other body: %v %d %s, want 422", err, other.StatusCode(), other.Body)
	} else if code, err := other.JSON422.Error.Code.AsErrorCode0(); err != nil || code != nahclient.ErrorCode0IdempotencyKeyReused {
		// The open enum's known values are the generated constants.
		t.Errorf("same key, other body: code %q (%v), want the constant %q", code, err, nahclient.ErrorCode0IdempotencyKeyReused)
	}
	own, err := ana.GetPersonMomentsWithResponse(ctx, ana.id, &nahclient.GetPersonMomentsParams{})
	if err != nil || own.JSON200 == nil {
		t.Fatalf("own moments: %v %d %s", err, own.StatusCode(), own.Body)
	}
	if got := ids(own.JSON200.Moments); len(got) != 1 || got[0] != first.JSON201.Id {
		t.Fatalf("after a post, its retry and a reused key ana has %v, want [%s]", got, first.JSON201.Id)
	}
	if !bytes.Equal(own.JSON200.Moments[0].Body, body) {
		t.Errorf("body read back %x, posted %x", own.JSON200.Moments[0].Body, body)
	}

	// The feed: an ETag, then 304 for the same page.
	time.Sleep(5 * time.Millisecond) // a refresh shows only moments older than the current millisecond
	feed, err := ana.GetFeedWithResponse(ctx, &nahclient.GetFeedParams{})
	if err != nil || feed.JSON200 == nil {
		t.Fatalf("feed: %v %d %s", err, feed.StatusCode(), feed.Body)
	}
	etag := feed.HTTPResponse.Header.Get("ETag")
	if etag == "" {
		t.Fatal("the feed has no ETag")
	}
	if feed.JSON200.Refresh == nil {
		t.Fatalf("the feed of %v has no refresh cursor", ids(feed.JSON200.Moments))
	}
	refresh := *feed.JSON200.Refresh
	same, err := ana.GetFeedWithResponse(ctx, &nahclient.GetFeedParams{IfNoneMatch: &etag})
	if err != nil || same.StatusCode() != http.StatusNotModified || len(same.Body) != 0 {
		t.Fatalf("unchanged feed with If-None-Match: %v %d %q, want 304 and no body", err, same.StatusCode(), same.Body)
	}

	// rui posts twice: the ETag changes, and after= gives only those two.
	var newer []string
	for _, b := range []string{"one", "two"} {
		res, err := rui.PostMomentWithResponse(ctx, &nahclient.PostMomentParams{}, nahclient.NewMoment{Body: []byte(b)})
		if err != nil || res.JSON201 == nil {
			t.Fatalf("rui's post: %v %d %s", err, res.StatusCode(), res.Body)
		}
		newer = append([]string{res.JSON201.Id}, newer...)
		time.Sleep(2 * time.Millisecond)
	}
	changed, err := ana.GetFeedWithResponse(ctx, &nahclient.GetFeedParams{IfNoneMatch: &etag})
	if err != nil || changed.JSON200 == nil {
		t.Fatalf("feed after rui's posts with the old ETag: %v %d, want 200", err, changed.StatusCode())
	}
	if e := changed.HTTPResponse.Header.Get("ETag"); e == etag {
		t.Errorf("the ETag %s did not change with two new moments", e)
	}
	delta, err := ana.GetFeedWithResponse(ctx, &nahclient.GetFeedParams{After: &refresh})
	if err != nil || delta.JSON200 == nil {
		t.Fatalf("feed after=: %v %d %s", err, delta.StatusCode(), delta.Body)
	}
	if got := strings.Join(ids(delta.JSON200.Moments), ","); got != strings.Join(newer, ",") {
		t.Errorf("feed after the refresh cursor = %s, want only the newer %s", got, strings.Join(newer, ","))
	}
	if delta.JSON200.Next != nil {
		t.Errorf("a two-moment refresh has next %q", *delta.JSON200.Next)
	}

	// An FCM token has ':' in it; in the body it needs no escaping.
	fcm := "cX2k9:APA91bH-7sQ_zq:token-part"
	dev, err := ana.RegisterDeviceWithResponse(ctx, nahclient.DeviceRegistration{Token: fcm, Platform: nahclient.DeviceRegistrationPlatformAndroid})
	if err != nil || dev.StatusCode() != http.StatusNoContent {
		t.Fatalf("register device: %v %d %s", err, dev.StatusCode(), dev.Body)
	}
	gone, err := ana.UnregisterDeviceWithResponse(ctx, nahclient.DeviceRef{Token: fcm})
	if err != nil || gone.StatusCode() != http.StatusNoContent {
		t.Fatalf("unregister device: %v %d %s", err, gone.StatusCode(), gone.Body)
	}
	again, err := ana.UnregisterDeviceWithResponse(ctx, nahclient.DeviceRef{Token: fcm})
	if err != nil || again.StatusCode() != http.StatusNotFound {
		t.Errorf("unregister a removed device: %v %d %s, want 404", err, again.StatusCode(), again.Body)
	}

	// Media: a concrete type is kept and served back as it was sent.
	media := make([]byte, 70_000)
	for i := range media {
		media[i] = byte(i*7 + i/251)
	}
	up, err := ana.UploadMediaWithBodyWithResponse(ctx, &nahclient.UploadMediaParams{}, "image/jpeg", bytes.NewReader(media))
	if err != nil || up.JSON201 == nil {
		t.Fatalf("upload: %v %d %s", err, up.StatusCode(), up.Body)
	}
	sum := sha256.Sum256(media)
	if up.JSON201.ContentType != "image/jpeg" || up.JSON201.Size != int64(len(media)) || up.JSON201.Sha256 != hex.EncodeToString(sum[:]) {
		t.Errorf("upload answered %+v", *up.JSON201)
	}
	got, err := ana.GetMediaWithResponse(ctx, ana.id, up.JSON201.Id, &nahclient.GetMediaParams{})
	if err != nil || got.StatusCode() != http.StatusOK {
		t.Fatalf("download: %v %d", err, got.StatusCode())
	}
	if ct := got.HTTPResponse.Header.Get("Content-Type"); ct != "image/jpeg" {
		t.Errorf("media served as %q, uploaded as image/jpeg", ct)
	}
	if !bytes.Equal(got.Body, media) {
		t.Errorf("media read back differs: %d bytes, uploaded %d", len(got.Body), len(media))
	}
	// A HEAD answer has no body, whatever its status: a client that reads
	// one for a documented error fails on the empty body instead.
	stale := `"0000"`
	pre, err := ana.HeadMediaWithResponse(ctx, ana.id, up.JSON201.Id, &nahclient.HeadMediaParams{IfMatch: &stale})
	if err != nil {
		t.Errorf("HEAD media with a stale If-Match: %v", err)
	} else if pre.StatusCode() != http.StatusPreconditionFailed {
		t.Errorf("HEAD media with a stale If-Match: %d, want 412", pre.StatusCode())
	}

	// The export, read by the generated client as bytes: a valid tar whose
	// entries match the manifest's sizes and checksums, the media as sent.
	exp, err := ana.ExportMeWithResponse(ctx)
	if err != nil || exp.StatusCode() != http.StatusOK {
		t.Fatalf("export: %v %d", err, exp.StatusCode())
	}
	if bytes.Contains(exp.Body, []byte("\uFFFD")) {
		t.Error("the export holds U+FFFD: it was read as text")
	}
	checkExport(t, exp.Body, map[string][]byte{"media/" + up.JSON201.Id: media})
}

// checkExport reads a whole export tar and checks it against the manifest
// (last), and the entries of want byte for byte.
func checkExport(t *testing.T, b []byte, want map[string][]byte) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	type entry struct {
		size int64
		sum  string
	}
	var names []string
	entries := map[string]entry{}
	var manifest []byte
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("export is not a valid tar after %v: %v", names, err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("export entry %s: %v", h.Name, err)
		}
		if h.Name == "manifest.json" {
			manifest = data
			continue
		}
		if w, ok := want[h.Name]; ok && !bytes.Equal(data, w) {
			t.Errorf("export entry %s differs from what was uploaded", h.Name)
		}
		sum := sha256.Sum256(data)
		names = append(names, h.Name)
		entries[h.Name] = entry{int64(len(data)), hex.EncodeToString(sum[:])}
	}
	for name := range want {
		if _, ok := entries[name]; !ok {
			t.Errorf("export lacks %s; it has %v", name, names)
		}
	}
	// Format 2: the manifest lists person.db and counts the media files.
	var m struct {
		Format        string `json:"format"`
		FormatVersion int    `json:"format_version"`
		Files         []struct {
			Name   string `json:"name"`
			Size   int64  `json:"size"`
			SHA256 string `json:"sha256"`
		} `json:"files"`
		MediaCount int `json:"media_count"`
	}
	if err := json.Unmarshal(manifest, &m); err != nil {
		t.Fatalf("export's manifest.json: %v: %q", err, manifest)
	}
	if m.Format != "nah-export" || m.FormatVersion != 2 || len(m.Files) != 1 || len(names) == 0 || names[0] != "person.db" {
		t.Fatalf("manifest format %q version %d lists %d files, the tar has %v", m.Format, m.FormatVersion, len(m.Files), names)
	}
	if f := m.Files[0]; f.Name != "person.db" || entries[f.Name] != (entry{f.Size, f.SHA256}) {
		t.Errorf("manifest file is %+v, the tar's person.db %+v", f, entries["person.db"])
	}
	if m.MediaCount != len(names)-1 {
		t.Errorf("manifest counts %d media, the tar has %v", m.MediaCount, names)
	}
}
