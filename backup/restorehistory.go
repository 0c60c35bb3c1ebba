package backup

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/benbjohnson/litestream/file"
	"github.com/superfly/ltx"
)

// Restoring from a Litestream history (RestoreFileWithin, restore.go):
// the plan's LTX files fetched within a bound, checked, and replayed.

// restoreHistory restores rel at out from its Litestream history, writing
// at most limit bytes, and checks the result whole. Litestream reads
// copies of the plan's LTX files made and checked first (fetchPlan): what
// it decodes cannot change on the target after the check.
func restoreHistory(ctx context.Context, t *Target, rel, out string, at time.Time, limit int64) error {
	c, err := t.restoreClient(rel)
	if err != nil {
		return err
	}
	plan, err := litestream.CalcRestorePlan(ctx, c, 0, at, slog.New(slog.DiscardHandler))
	if err != nil {
		return fmt.Errorf("cannot calc restore plan: %w", err)
	}
	local := out + ".ltx"
	os.RemoveAll(local) // a killed restore's
	defer os.RemoveAll(local)
	if err := c.fetchPlan(ctx, plan, local, limit); err != nil {
		return err
	}
	if afterFetchPlan != nil {
		afterFetchPlan(rel)
	}
	r := litestream.NewReplicaWithClient(nil, c)
	opt := litestream.NewRestoreOptions()
	opt.OutputPath = out
	opt.Timestamp = at
	// Checked here rather than by Litestream, which removes a file that
	// fails: the same check for the history and the sweeps, in one place.
	opt.IntegrityCheck = litestream.IntegrityCheckNone
	if err := restoreWithin(ctx, r, opt, limit); err != nil {
		return err
	}
	return checkSound(ctx, out)
}

// afterFetchPlan, when set (by a test), runs between fetchPlan and
// Litestream's restore, as a live server's compaction may.
var afterFetchPlan func(rel string)

// fetchPlan copies the LTX files of plan into the new folder dir, at
// most limit bytes in all, and checks each (checkLTXFile). From then on c
// serves those copies, and no other file.
func (c *restoreClient) fetchPlan(ctx context.Context, plan []*ltx.FileInfo, dir string, limit int64) error {
	var total int64
	for _, f := range plan {
		total += f.Size
	}
	if total > limit {
		return fmt.Errorf("its %d LTX files are %d bytes, %w (%d bytes)", len(plan), total, ErrTooLarge, limit)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	local := map[string]string{}
	var copied int64
	for _, f := range plan {
		name := ltx.FormatFilename(f.MinTXID, f.MaxTXID)
		p := filepath.Join(dir, fmt.Sprintf("%d-%s", f.Level, name))
		rc, err := c.OpenLTXFile(ctx, f.Level, f.MinTXID, f.MaxTXID, 0, 0)
		if err != nil {
			return err
		}
		n, err := copyFile(rc, p, limit-copied)
		rc.Close()
		copied += n
		if err == nil {
			err = checkLTXFile(p, limit)
		}
		if err != nil {
			return fmt.Errorf("LTX file %s of level %d: %w", name, f.Level, err)
		}
		local[fmt.Sprintf("%d/%s", f.Level, name)] = p
	}
	c.local, c.plan = local, plan
	return nil
}

// copyFile copies r into a new file at p, at most limit bytes, and says
// how many it copied.
func copyFile(r io.Reader, p string, limit int64) (int64, error) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, io.LimitReader(r, limit+1))
	if err == nil && n > limit {
		err = fmt.Errorf("past %d bytes, %w", limit, ErrTooLarge)
	}
	return n, errors.Join(err, f.Close())
}

// checkLTXFile checks the LTX file at p before Litestream reads it, and
// refuses one whose restore would write more than limit bytes: what
// Litestream writes is the plan's last file's Commit pages of PageSize
// (ltx's compactor takes the last header's Commit, and its decoder writes
// exactly that many pages), and no file of an honest plan claims more than
// a restore may write. Then that ltx's decoder reads it without harm: it
// panics on a file that ends less than 8 bytes after its page block (any
// LTX file cut there: a panic in Litestream's restore goroutine, which no
// recover reaches, ends the server), reads whatever follows the block into
// memory, and allocates each page's compressed size as the file says it,
// up to 4 GiB. Here a page's size is bounded by LZ4's worst case for a
// page, and what follows the block by its index (3 varints a page) and
// trailer.
func checkLTXFile(p string, limit int64) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	br := bufio.NewReader(f)
	cr := &countingReader{r: br}
	dec := ltx.NewDecoder(cr)
	if err := dec.DecodeHeader(); err != nil {
		return fmt.Errorf("header: %w", err)
	}
	hdr := dec.Header()
	if claim := int64(hdr.Commit) * int64(hdr.PageSize); claim > limit {
		return fmt.Errorf("it claims a database of %d bytes (%d pages of %d), %w (%d bytes)", claim, hdr.Commit, hdr.PageSize, ErrTooLarge, limit)
	}
	pageMax := hdr.PageSize + hdr.PageSize/255 + 16 // LZ4_COMPRESSBOUND
	data := make([]byte, hdr.PageSize)
	for {
		if b, _ := br.Peek(ltx.PageHeaderSize + 4); len(b) == ltx.PageHeaderSize+4 {
			var ph ltx.PageHeader
			ph.UnmarshalBinary(b)
			if n := binary.BigEndian.Uint32(b[ltx.PageHeaderSize:]); !ph.IsZero() && ph.Flags&ltx.PageHeaderFlagSize != 0 && n > pageMax {
				return fmt.Errorf("page %d says it takes %d bytes compressed; a page of %d takes at most %d", ph.Pgno, n, hdr.PageSize, pageMax)
			}
		}
		var ph ltx.PageHeader
		err := dec.DecodePage(&ph, data)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("page %d: %w", dec.PageN()+1, err)
		}
	}
	least := int64(1 + 8 + ltx.TrailerSize)
	most := int64(dec.PageN())*3*binary.MaxVarintLen64 + least
	if rest := st.Size() - cr.n; rest < least || rest > most {
		return fmt.Errorf("%d bytes after its %d pages, not an index and a trailer (%d to %d bytes): the file is cut short or not an LTX file",
			rest, dec.PageN(), least, most)
	}
	return nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// restoreWatchEvery is how often restoreWithin looks at what the restore
// wrote: at the 1-2 GB/s a page cache takes, 10 ms lets it pass its bound
// by 20 MB at most.
const restoreWatchEvery = 10 * time.Millisecond

// restoreWithin is r.Restore stopped once its temporary file (Litestream
// writes out+".tmp", then renames it) passes limit bytes: a second bound
// behind checkLTXFile's, which holds only while ltx's decoder writes what
// its header says. r's client must be a restoreClient, whose reads end
// with ctx.
func restoreWithin(ctx context.Context, r *litestream.Replica, opt litestream.RestoreOptions, limit int64) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	over := fmt.Errorf("it wrote past %d bytes: %w", limit, ErrTooLarge)
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		tick := time.NewTicker(restoreWatchEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if st, err := os.Stat(opt.OutputPath + ".tmp"); err == nil && st.Size() > limit {
				cancel(over)
				return
			}
		}
	}()
	err := r.Restore(ctx, opt)
	close(done)
	<-watched
	if errors.Is(context.Cause(ctx), over) {
		removeDB(opt.OutputPath)
		return over
	}
	return err
}

// noHistory says whether err from restoreHistory means the target holds
// no history of the file as old as the time asked, rather than a history
// that failed.
func noHistory(err error) bool {
	return errors.Is(err, litestream.ErrNoSnapshots) || errors.Is(err, litestream.ErrTxNotAvailable) || errors.Is(err, os.ErrNotExist)
}

// newestPosition is the last transaction of rel's history up to at (zero:
// the newest) and its time, from the header of the LTX file that holds it
// (a file's modification time on the target is its upload's, or a copy's).
// Zero when the history cannot be listed.
func newestPosition(ctx context.Context, t *Target, rel string, at time.Time) (uint64, time.Time) {
	client, err := t.restoreClient(rel)
	if err != nil {
		return 0, time.Time{}
	}
	plan, err := litestream.CalcRestorePlan(ctx, client, 0, at, slog.Default())
	if err != nil || len(plan) == 0 {
		return 0, time.Time{}
	}
	last := plan[len(plan)-1]
	when := last.CreatedAt
	if rc, err := client.OpenLTXFile(ctx, last.Level, last.MinTXID, last.MaxTXID, 0, ltx.HeaderSize); err == nil {
		if hdr, _, err := ltx.PeekHeader(rc); err == nil && hdr.Timestamp > 0 {
			when = time.UnixMilli(hdr.Timestamp)
		}
		rc.Close()
	}
	return uint64(last.MaxTXID), when.UTC()
}

// restoreClient is rel's replica client for restores. On a directory
// target an LTX file is opened only if it is a regular file: a FIFO
// planted there would block the open for ever, a device would be read
// without end. Once fetchPlan has run, only its checked copies are
// served. Litestream's restore of its v0.3 layout, which nah never wrote
// and which decompresses a snapshot without any bound, is not offered
// (the client is not a litestream.ReplicaClientV3).
func (t *Target) restoreClient(rel string) (*restoreClient, error) {
	c, err := t.client(rel)
	if err != nil {
		return nil, err
	}
	fc, _ := c.(*file.ReplicaClient)
	return &restoreClient{ReplicaClient: c, dir: fc}, nil
}

type restoreClient struct {
	litestream.ReplicaClient
	dir   *file.ReplicaClient // a directory target's client; nil on S3
	local map[string]string   // "level/name": fetchPlan's copy
	plan  []*ltx.FileInfo     // fetchPlan's
}

// LTXFiles lists, once fetchPlan has run, the plan's files alone:
// Litestream's restore plans again from the listing, and a file a live
// server compacted onto the target since is one fetchPlan never checked
// (the restore failed with "appeared on the target during the restore").
func (c *restoreClient) LTXFiles(ctx context.Context, level int, seek ltx.TXID, useMetadata bool) (ltx.FileIterator, error) {
	if c.local == nil {
		return c.ReplicaClient.LTXFiles(ctx, level, seek, useMetadata)
	}
	var out []*ltx.FileInfo
	for _, f := range c.plan {
		if f.Level == level && f.MinTXID >= seek {
			out = append(out, f)
		}
	}
	return ltx.NewFileInfoSliceIterator(out), nil
}

// OpenLTXFile opens an LTX file whose reads fail once ctx ends: Litestream's
// compactor does not look at its context between pages, so a restore that
// restoreWithin stops ends at its next read.
func (c *restoreClient) OpenLTXFile(ctx context.Context, level int, minTXID, maxTXID ltx.TXID, offset, size int64) (io.ReadCloser, error) {
	var p string
	switch {
	case c.local != nil:
		name := ltx.FormatFilename(minTXID, maxTXID)
		if p = c.local[fmt.Sprintf("%d/%s", level, name)]; p == "" {
			return nil, fmt.Errorf("LTX file %s of level %d appeared on the target during the restore", name, level)
		}
	case c.dir != nil:
		p = c.dir.LTXFilePath(level, minTXID, maxTXID)
	default:
		rc, err := c.ReplicaClient.OpenLTXFile(ctx, level, minTXID, maxTXID, offset, size)
		if err != nil {
			return nil, err
		}
		return ctxReader{ctx, rc}, nil
	}
	f, err := openRegular(p)
	if err != nil {
		return nil, litestream.NewLTXError("open", p, level, uint64(minTXID), uint64(maxTXID), err)
	}
	if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			f.Close()
			return nil, err
		}
	}
	var r io.Reader = f
	if size > 0 {
		r = io.LimitReader(f, size)
	}
	return ctxReader{ctx, struct {
		io.Reader
		io.Closer
	}{r, f}}, nil
}

type ctxReader struct {
	ctx context.Context
	io.ReadCloser
}

func (r ctxReader) Read(p []byte) (int, error) {
	if err := context.Cause(r.ctx); err != nil {
		return 0, err
	}
	return r.ReadCloser.Read(p)
}
