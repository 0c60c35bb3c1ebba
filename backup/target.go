package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"sync"

	"github.com/benbjohnson/litestream"
	"github.com/benbjohnson/litestream/file"
	lss3 "github.com/benbjohnson/litestream/s3"
)

// Target is where replicas go: a directory on this machine (another disk,
// a mounted share) or a prefix in an S3-compatible bucket. Every database
// keeps its path under the data directory there, so
// people/<id>/person.db in the data directory replicates to
// <target>/people/<id>/person.db, which `litestream restore` reads as is.
type Target struct {
	URL string // as configured, for messages; Redacted for pages

	dir string // a directory target: its absolute path

	// An S3 target.
	bucket, prefix   string
	endpoint, region string
	keyID, secret    string

	mu     sync.Mutex
	s3tmpl *lss3.ReplicaClient // initialised once; every file's client is a copy
	blobs  blobStore           // plain objects: the sweep's copies
}

// ParseTarget reads NAH_REPLICA_URL: a path (relative paths are taken from
// the working directory), a file:// URL, or s3://bucket/prefix. An S3
// target takes its endpoint, region and keys from the usual AWS_ variables
// (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, AWS_REGION or
// AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), or from
// ?endpoint= and ?region= on the URL as Litestream's own command accepts.
func ParseTarget(raw string, getenv func(string) string) (*Target, error) {
	if raw == "" {
		return nil, errors.New("empty")
	}
	if !strings.Contains(raw, "://") {
		abs, err := filepath.Abs(raw)
		if err != nil {
			return nil, err
		}
		return &Target{URL: raw, dir: abs}, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("not a URL: %v", err)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("file URL with a host %q: write file:///absolute/path", u.Host)
		}
		if u.Path == "" {
			return nil, errors.New("file URL without a path")
		}
		return &Target{URL: raw, dir: filepath.Clean(u.Path)}, nil
	case "s3":
		if u.Host == "" {
			return nil, errors.New("s3 URL without a bucket: write s3://bucket/prefix")
		}
		if u.User != nil {
			return nil, errors.New("s3 URL with credentials in it: use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
		}
		first := func(names ...string) string {
			for _, n := range names {
				if v := getenv(n); v != "" {
					return v
				}
			}
			return ""
		}
		t := &Target{
			URL:      raw,
			bucket:   u.Host,
			prefix:   strings.Trim(u.Path, "/"),
			endpoint: first("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
			region:   first("AWS_REGION", "AWS_DEFAULT_REGION"),
			keyID:    getenv("AWS_ACCESS_KEY_ID"),
			secret:   getenv("AWS_SECRET_ACCESS_KEY"),
		}
		q := u.Query()
		if v := q.Get("endpoint"); v != "" {
			t.endpoint = v
		}
		if v := q.Get("region"); v != "" {
			t.region = v
		}
		if t.endpoint != "" {
			if e, err := url.Parse(t.endpoint); err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
				return nil, fmt.Errorf("S3 endpoint %q is not an http(s) URL", t.endpoint)
			}
		}
		if t.region == "" {
			t.region = "us-east-1"
		}
		if (t.keyID == "") != (t.secret == "") {
			return nil, errors.New("S3 needs both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or neither (instance credentials)")
		}
		return t, nil
	default:
		return nil, fmt.Errorf("unknown scheme %q: a path, file:///path or s3://bucket/prefix", u.Scheme)
	}
}

// Dir is a directory target's absolute path ("" for S3).
func (t *Target) Dir() string { return t.dir }

// IsS3 says whether the target is a bucket.
func (t *Target) IsS3() bool { return t.bucket != "" }

// Redacted is the target for pages and logs: no credentials ever appear in
// the URL (they come from the environment), so this is the URL with the key
// id shown by its first four characters.
func (t *Target) Redacted() string {
	if !t.IsS3() {
		return t.dir
	}
	s := "s3://" + t.bucket + "/" + t.prefix
	if t.endpoint != "" {
		s += " at " + t.endpoint
	}
	if t.keyID != "" {
		k := t.keyID
		if len(k) > 4 {
			k = k[:4]
		}
		s += " (key " + k + "…)"
	}
	return s
}

// ReplicaURL is the URL of one database's replica as `litestream restore`
// takes it.
func (t *Target) ReplicaURL(rel string) string {
	if !t.IsS3() {
		return "file://" + filepath.Join(t.dir, filepath.FromSlash(rel))
	}
	q := url.Values{}
	if t.endpoint != "" {
		q.Set("endpoint", t.endpoint)
	}
	q.Set("region", t.region)
	return "s3://" + t.bucket + "/" + path.Join(t.prefix, rel) + "?" + q.Encode()
}

// Init checks that the target can be used: a directory is created, a bucket
// is reached with the keys given (a wrong key or a missing bucket is an
// error here, at start, not an hour later in a log).
func (t *Target) Init(ctx context.Context) error {
	if !t.IsS3() {
		return os.MkdirAll(t.dir, 0o700)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.s3tmpl != nil {
		return nil
	}
	// Litestream's S3 client cannot use a custom CA bundle and refuses to
	// start when AWS_CA_BUNDLE is set (upstream issue 639): the replica
	// client ignores it, and docs/backups.md says so.
	os.Unsetenv("AWS_CA_BUNDLE")
	c := lss3.NewReplicaClient()
	c.Bucket, c.Path, c.Region = t.bucket, t.prefix, t.region
	c.Endpoint, c.ForcePathStyle = t.endpoint, t.endpoint != ""
	c.AccessKeyID, c.SecretAccessKey = t.keyID, t.secret
	if err := c.Init(ctx); err != nil {
		return err
	}
	b, err := newS3Blobs(ctx, t)
	if err != nil {
		return err
	}
	if err := b.check(ctx); err != nil {
		return err
	}
	t.s3tmpl, t.blobs = c, b
	return nil
}

// Check says whether the target answers and takes writes now: a file made
// and removed in a directory, the bucket reached in S3 (a write refused
// there shows in the replication of each file).
func (t *Target) Check(ctx context.Context) error {
	if !t.IsS3() {
		f, err := os.CreateTemp(t.dir, ".check-*")
		if err != nil {
			return err
		}
		f.Close()
		return os.Remove(f.Name())
	}
	t.mu.Lock()
	b := t.blobs
	t.mu.Unlock()
	s, ok := b.(*s3Blobs)
	if !ok {
		return errors.New("replica target not initialised")
	}
	return s.check(ctx)
}

// client returns the Litestream replica client of one database, rel being
// its slash-separated path under the data directory.
func (t *Target) client(rel string) (litestream.ReplicaClient, error) {
	if !t.IsS3() {
		return file.NewReplicaClient(filepath.Join(t.dir, filepath.FromSlash(rel))), nil
	}
	t.mu.Lock()
	tmpl := t.s3tmpl
	t.mu.Unlock()
	if tmpl == nil {
		return nil, errors.New("replica target not initialised")
	}
	// Litestream's S3 client builds an HTTP transport (with its own pool of
	// connections) in Init, one per client, and has no way to pass one in.
	// Every file's client is a copy of one initialised client instead, so
	// they all share its S3 service client and one transport. Copied
	// through reflect because the struct holds a mutex (unlocked: the
	// template is never used after Init); the version is pinned in go.mod.
	c := new(lss3.ReplicaClient)
	reflect.ValueOf(c).Elem().Set(reflect.ValueOf(tmpl).Elem())
	c.Path = path.Join(t.prefix, rel)
	return c, nil
}

// blobStore holds plain objects on the target: the sweep's copies.
type blobStore interface {
	put(ctx context.Context, key string, r io.Reader, size int64) error
	get(ctx context.Context, key string) (io.ReadCloser, error)
	list(ctx context.Context, prefix string) ([]string, error) // keys under prefix, sorted
	remove(ctx context.Context, prefix string) error           // every key under prefix
	// open is get with the object's size, which a tar header needs first.
	open(ctx context.Context, key string) (io.ReadCloser, int64, error)
	// children are the names one level under prefix, files or folders,
	// sorted: the sweeps' stamps without listing each sweep's files.
	children(ctx context.Context, prefix string) ([]string, error)
	// usage counts the keys under prefix and their bytes, the first limit
	// of them (0: every one), errUsageLimit when there were more.
	usage(ctx context.Context, prefix string, limit int) (n int, bytes int64, err error)
}

// store returns the target's plain-object store.
func (t *Target) store() blobStore {
	if !t.IsS3() {
		return dirBlobs(t.dir)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.blobs
}
