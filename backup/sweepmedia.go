package backup

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nah-app/nah"
)

// Media in a sweep: each file mirrored once to <target>/media/<path>, and
// removed there once its original is gone (sweep.go).

// mediaPrefix is where media files are mirrored on the target.
const mediaPrefix = "media"

// mirrorMedia copies the media files the target lacks and removes those
// whose original is gone, a person at a time (the people of rels, the
// databases listed for this sweep): its memory is one person's media ids
// on the target (mirrorPerson), not everyone's. A person mirrored whose
// folder is gone goes whole.
func (s *Sweeper) mirrorMedia(ctx context.Context, blobs blobStore, rels []string) (copied int, bytes int64, failed []string, err error) {
	people := map[string]bool{}
	for _, rel := range rels {
		id := nah.PersonOfRel(rel)
		if id == "" {
			continue
		}
		people[id] = true
		n, b, f, err := s.mirrorPerson(ctx, blobs, id)
		copied, bytes, failed = copied+n, bytes+b, append(failed, f...)
		if err != nil {
			if ctx.Err() != nil {
				return copied, bytes, failed, err
			}
			failed = append(failed, nah.MediaDirRel(id)+": "+err.Error())
		}
	}
	mirrored, err := blobs.children(ctx, path.Join(mediaPrefix, nah.PeopleRel))
	if err != nil {
		return copied, bytes, failed, err
	}
	for _, id := range mirrored {
		if people[id] || !nah.ValidPersonID(id) {
			continue
		}
		if err := blobs.remove(ctx, path.Join(mediaPrefix, nah.PersonDirRel(id))); err != nil {
			failed = append(failed, nah.PersonDirRel(id)+": remove: "+err.Error())
		}
	}
	return copied, bytes, failed, nil
}

// mirrorPerson mirrors person id's media: their media ids on the target in
// a set of fixed-size keys, then their folder read a batch at a time, each
// name not in the set copied; what is left of the set goes, unless the
// folder could not be read to its end. The set is what grows with their
// media: 46-61 bytes an id (TestBackupWalksMemoryIsConstant), ~6 MB at
// nah.MaxMediaCount; the target's keys as strings, listed whole, took 247.
func (s *Sweeper) mirrorPerson(ctx context.Context, blobs blobStore, id string) (copied int, bytes int64, failed []string, err error) {
	prefix := path.Join(mediaPrefix, nah.MediaDirRel(id))
	have := map[mediaKey]struct{}{}
	var others []string // names on the target the store never makes: they go
	err = eachName(ctx, blobs, prefix, func(names []string) error {
		for _, name := range names {
			if k, ok := keyOf(name); ok {
				have[k] = struct{}{}
			} else {
				others = append(others, name)
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, nil, err
	}
	err = s.Source.MediaOf(ctx, id, func(names []string) error {
		for _, name := range names {
			if k, ok := keyOf(name); ok {
				if _, mirrored := have[k]; mirrored {
					delete(have, k)
					continue
				}
			}
			rel := nah.MediaRel(id, name)
			n, err := s.copyMedia(ctx, blobs, rel)
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted since the folder was read
			}
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				failed = append(failed, rel+": "+err.Error())
				continue
			}
			copied++
			bytes += n
		}
		return nil
	})
	if err != nil {
		return copied, bytes, failed, err
	}
	for k := range have {
		others = append(others, string(k[:]))
	}
	for _, name := range others {
		if err := removeObject(ctx, blobs, path.Join(prefix, name)); err != nil {
			failed = append(failed, nah.MediaRel(id, name)+": remove: "+err.Error())
		}
	}
	return copied, bytes, failed, nil
}

// removeObject removes the one object key. blobStore.remove takes a
// prefix, which on S3 lists "key/" and so never found the object itself:
// a mirrored media whose original was deleted stayed on the bucket
// (TestS3MirrorsMediaInPages).
func removeObject(ctx context.Context, blobs blobStore, key string) error {
	if b, ok := blobs.(*s3Blobs); ok {
		_, err := b.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(b.key(key))})
		return err
	}
	return blobs.remove(ctx, key)
}

// mediaKey is a media id as a map key of its own size, not a string.
type mediaKey [nah.IDLen]byte

func keyOf(name string) (k mediaKey, ok bool) {
	if !nah.ValidMediaID(name) {
		return k, false
	}
	copy(k[:], name)
	return k, true
}

// eachName calls fn with the names of the objects right under prefix, a
// batch at a time in no set order: a folder target's folder read 256
// names a read, S3's listing a page (1,000) at a time, not whole.
func eachName(ctx context.Context, blobs blobStore, prefix string, fn func(names []string) error) error {
	switch b := blobs.(type) {
	case dirBlobs:
		p, err := b.path(prefix)
		if err != nil {
			return err
		}
		d, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		defer d.Close()
		names := make([]string, 0, 256)
		for {
			es, rerr := d.ReadDir(256)
			names = names[:0]
			for _, e := range es {
				if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".part-") {
					names = append(names, e.Name())
				}
			}
			if err := fn(names); err != nil {
				return err
			}
			if rerr == io.EOF {
				return nil
			}
			if rerr != nil {
				return rerr
			}
		}
	case *s3Blobs:
		full := b.key(prefix) + "/"
		p := s3.NewListObjectsV2Paginator(b.c, &s3.ListObjectsV2Input{Bucket: aws.String(b.bucket), Prefix: aws.String(full)})
		var names []string
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return err
			}
			names = names[:0]
			for _, o := range page.Contents {
				if name, ok := strings.CutPrefix(aws.ToString(o.Key), full); ok && !strings.Contains(name, "/") {
					names = append(names, name)
				}
			}
			if err := fn(names); err != nil {
				return err
			}
		}
		return nil
	default:
		keys, err := blobs.list(ctx, prefix)
		if err != nil {
			return err
		}
		names := keys[:0]
		for _, k := range keys {
			if name, ok := strings.CutPrefix(k, prefix+"/"); ok && !strings.Contains(name, "/") {
				names = append(names, name)
			}
		}
		return fn(names)
	}
}

func (s *Sweeper) copyMedia(ctx context.Context, blobs blobStore, rel string) (int64, error) {
	f, err := s.Source.OpenMediaFile(rel)
	if err != nil {
		return 0, err
	}
	return putFile(ctx, blobs, path.Join(mediaPrefix, rel), f)
}

// MediaFiles lists the media files mirrored on the target, as paths under
// the data directory.
func MediaFiles(ctx context.Context, t *Target) ([]string, error) {
	keys, err := t.store().list(ctx, mediaPrefix)
	if err != nil {
		return nil, err
	}
	out := keys[:0]
	for _, k := range keys {
		rel := strings.TrimPrefix(k, mediaPrefix+"/")
		if owner, name := nah.SplitMediaRel(rel); owner != "" && validName(name) {
			out = append(out, rel)
		}
	}
	return out, nil
}

// RestoreMedia copies mirrored media file rel to out (which must not exist).
func RestoreMedia(ctx context.Context, t *Target, rel, out string) error {
	return copyTo(ctx, t.store(), path.Join(mediaPrefix, rel), out, RestoreMaxBytes)
}

// validName: a file name of letters, digits, - and _ only.
func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
