package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// dirBlobs keeps objects as files under a directory; keys are
// slash-separated paths below it.
type dirBlobs string

func (d dirBlobs) path(key string) (string, error) {
	if !fs.ValidPath(key) {
		return "", fmt.Errorf("bad key %q", key)
	}
	return filepath.Join(string(d), filepath.FromSlash(key)), nil
}

func (d dirBlobs) put(ctx context.Context, key string, r io.Reader, size int64) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".part-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, r); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}

func (d dirBlobs) get(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, err
	}
	return openRegular(p)
}

// fileKind names what a file that is not a regular one is.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a folder"
	}
	return "a special file (" + m.Type().String() + ")"
}

// openRegular opens the file at p for reading if it is a regular file.
// Anything else planted on a target is refused: a FIFO would block the
// open for ever (hence O_NONBLOCK, which a regular file's reads ignore),
// a device be read without end.
func openRegular(p string) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s is %s, not a regular file", filepath.Base(p), fileKind(st.Mode()))
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func (d dirBlobs) list(ctx context.Context, prefix string) ([]string, error) {
	root, err := d.path(prefix)
	if err != nil {
		return nil, err
	}
	var keys []string
	err = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == root {
				return fs.SkipAll
			}
			return err
		}
		if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".part-") {
			rel, _ := filepath.Rel(string(d), p)
			keys = append(keys, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(keys)
	return keys, err
}

func (d dirBlobs) remove(ctx context.Context, prefix string) error {
	p, err := d.path(prefix)
	if err != nil {
		return err
	}
	return os.RemoveAll(p)
}

// s3Blobs keeps objects in the target's bucket under its prefix.
type s3Blobs struct {
	c      *s3.Client
	bucket string
	prefix string
}

func newS3Blobs(ctx context.Context, t *Target) (*s3Blobs, error) {
	opts := s3.Options{
		Region:     t.region,
		HTTPClient: &http.Client{Timeout: 10 * time.Minute},
	}
	if t.keyID != "" {
		opts.Credentials = credentials.NewStaticCredentialsProvider(t.keyID, t.secret, "")
	}
	if t.endpoint != "" {
		opts.BaseEndpoint = aws.String(t.endpoint)
		opts.UsePathStyle = true
	}
	return &s3Blobs{c: s3.New(opts), bucket: t.bucket, prefix: t.prefix}, nil
}

func (b *s3Blobs) key(k string) string { return path.Join(b.prefix, k) }

// check reaches the bucket once with the keys given.
func (b *s3Blobs) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	_, err := b.c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(b.bucket)})
	if err != nil {
		return fmt.Errorf("bucket %s: %w", b.bucket, err)
	}
	return nil
}

func (b *s3Blobs) put(ctx context.Context, key string, r io.Reader, size int64) error {
	// PutObject needs a length or a seekable body; the sweep hands files.
	_, err := b.c.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(b.bucket),
		Key:           aws.String(b.key(key)),
		Body:          r,
		ContentLength: aws.Int64(size),
	})
	return err
}

func (b *s3Blobs) get(ctx context.Context, key string) (io.ReadCloser, error) {
	out, err := b.c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(b.key(key))})
	if err != nil {
		var nk *types.NoSuchKey
		if errors.As(err, &nk) {
			return nil, fs.ErrNotExist
		}
		return nil, err
	}
	return out.Body, nil
}

func (b *s3Blobs) list(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	full := b.key(prefix) + "/"
	if full == "./" || full == "/" {
		full = ""
	}
	p := s3.NewListObjectsV2Paginator(b.c, &s3.ListObjectsV2Input{Bucket: aws.String(b.bucket), Prefix: aws.String(full)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, o := range page.Contents {
			k := strings.TrimPrefix(aws.ToString(o.Key), strings.TrimPrefix(b.prefix+"/", "/"))
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys, nil
}

func (b *s3Blobs) remove(ctx context.Context, prefix string) error {
	keys, err := b.list(ctx, prefix)
	if err != nil {
		return err
	}
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		var ids []types.ObjectIdentifier
		for _, k := range keys[:n] {
			ids = append(ids, types.ObjectIdentifier{Key: aws.String(b.key(k))})
		}
		keys = keys[n:]
		if _, err := b.c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(b.bucket), Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)}}); err != nil {
			return err
		}
	}
	return nil
}

func (d dirBlobs) open(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, 0, err
	}
	f, err := openRegular(p)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}

func (d dirBlobs) children(ctx context.Context, prefix string) ([]string, error) {
	p, err := d.path(prefix)
	if err != nil {
		return nil, err
	}
	es, err := os.ReadDir(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out, err
}

func (d dirBlobs) usage(ctx context.Context, prefix string, limit int) (n int, bytes int64, err error) {
	root, err := d.path(prefix)
	if err != nil {
		return 0, 0, err
	}
	return dirUsage(ctx, root, limit, nil)
}

// errUsageLimit ends a usage listing that reached its limit: the counts
// returned with it are those of the first limit keys, a lower bound.
var errUsageLimit = errors.New("more keys than the listing's limit")

// dirUsage counts the files under root and their bytes, the first limit
// of them (errUsageLimit past it; 0: no limit), leaving out the folders
// skip says to and the blob store's unfinished ".part-" files.
func dirUsage(ctx context.Context, root string, limit int, skip func(path string) bool) (n int, bytes int64, err error) {
	err = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			switch {
			case errors.Is(err, fs.ErrNotExist) && p == root:
				return fs.SkipAll
			case errors.Is(err, fs.ErrNotExist):
				return nil // removed under the walk: a sync's temporary file, a pruned folder
			}
			return err
		}
		if e.IsDir() && skip != nil && p != root && skip(p) {
			return fs.SkipDir
		}
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".part-") {
			return nil
		}
		if limit > 0 && n >= limit {
			return errUsageLimit
		}
		if n%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		st, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed since it was listed
		}
		if err != nil {
			return err
		}
		n, bytes = n+1, bytes+st.Size()
		return nil
	})
	return n, bytes, err
}

func (b *s3Blobs) open(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	out, err := b.c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(b.key(key))})
	if err != nil {
		var nk *types.NoSuchKey
		if errors.As(err, &nk) {
			return nil, 0, fs.ErrNotExist
		}
		return nil, 0, err
	}
	if out.ContentLength == nil {
		out.Body.Close()
		return nil, 0, fmt.Errorf("%s: the bucket gave no size", key)
	}
	return out.Body, *out.ContentLength, nil
}

// prefixOf is the bucket's prefix for keys under prefix, "" at the root.
func (b *s3Blobs) prefixOf(prefix string) string {
	full := b.key(prefix) + "/"
	if full == "./" || full == "/" {
		return ""
	}
	return full
}

func (b *s3Blobs) children(ctx context.Context, prefix string) ([]string, error) {
	full := b.prefixOf(prefix)
	var out []string
	p := s3.NewListObjectsV2Paginator(b.c, &s3.ListObjectsV2Input{Bucket: aws.String(b.bucket), Prefix: aws.String(full), Delimiter: aws.String("/")})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, c := range page.CommonPrefixes {
			out = append(out, strings.TrimSuffix(strings.TrimPrefix(aws.ToString(c.Prefix), full), "/"))
		}
		for _, o := range page.Contents {
			out = append(out, strings.TrimPrefix(aws.ToString(o.Key), full))
		}
	}
	sort.Strings(out)
	return out, nil
}

func (b *s3Blobs) usage(ctx context.Context, prefix string, limit int) (n int, bytes int64, err error) {
	p := s3.NewListObjectsV2Paginator(b.c, &s3.ListObjectsV2Input{Bucket: aws.String(b.bucket), Prefix: aws.String(b.prefixOf(prefix))})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return 0, 0, err
		}
		for _, o := range page.Contents {
			if limit > 0 && n >= limit {
				return n, bytes, errUsageLimit
			}
			n, bytes = n+1, bytes+aws.ToInt64(o.Size)
		}
	}
	return n, bytes, nil
}
