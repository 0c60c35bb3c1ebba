package backup

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/benbjohnson/litestream/file"
	"github.com/superfly/ltx"

	"github.com/nah-app/nah"
)

// Databases lists every database the target can give back, as paths under
// the data directory: those with Litestream history and those in the newest
// complete sweep.
func Databases(ctx context.Context, t *Target) ([]string, error) {
	keys, err := t.store().list(ctx, ".")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, k := range keys {
		if strings.HasPrefix(k, sweepPrefix+"/") {
			continue
		}
		// A history's files: <db>/ltx/<level>/<name>.ltx in a directory,
		// <db>/<level, four hex digits>/<name>.ltx on S3 (Litestream's
		// two layouts).
		if strings.HasSuffix(k, ".ltx") {
			d := path.Dir(path.Dir(k))
			if path.Base(d) == "ltx" {
				d = path.Dir(d)
			}
			seen[d] = true
		}
	}
	sweeps, err := listSweeps(ctx, t.store())
	if err != nil {
		return nil, err
	}
	for i := len(sweeps) - 1; i >= 0; i-- {
		if sweeps[i].complete {
			for f := range sweeps[i].files {
				seen[f] = true
			}
			break
		}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		if validRel(k) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out, nil
}

// validRel says whether rel is a database path nah makes: directory.db or
// people/<id>/person.db with id of the root's exact shape, so that nothing
// read from a replica can climb out of a folder.
func validRel(rel string) bool { return nah.ValidDatabaseRel(rel) }

// ErrNothing is returned when the target holds nothing of a database for
// the time asked.
var ErrNothing = errors.New("no copy of this database on the replica")

// Where RestoreFile's copy came from (Restored.From).
const (
	FromHistory = "history"
	FromSweep   = "sweep"
)

// Restored says where RestoreFile's copy of one database came from and,
// when the Litestream history was there but did not restore to a sound
// database, why not and what the sweep's copy used instead costs.
type Restored struct {
	From    string    // FromHistory, FromSweep, or "" when no sound copy came back
	Sweep   string    // the sweep's stamp, when From is FromSweep
	SweepAt time.Time // when that sweep started: its copy is the file as it was then or a little later

	// HistoryErr is why the history did not give a sound database:
	// Litestream's restore failed, or SQLite's integrity check of its
	// result did. Nil when it did, or when the target holds no history of
	// the file for the time asked (then the sweep is the copy to use).
	HistoryErr error
	// HistoryTXID and HistoryAt are the newest position of the failed
	// history up to the time asked (its last transaction and that
	// transaction's time): what a sound history would have given back.
	// Zero when HistoryErr is nil or the history cannot even be listed.
	HistoryTXID uint64
	HistoryAt   time.Time
}

// String is where the copy came from, as the console shows it: "history"
// or "sweep <stamp>".
func (r Restored) String() string {
	if r.From == FromSweep {
		return FromSweep + " " + r.Sweep
	}
	return r.From
}

// Fallback says whether the copy is a sweep's taken because the history
// failed: the restore then lost what was written after the sweep.
func (r Restored) Fallback() bool { return r.From == FromSweep && r.HistoryErr != nil }

// Behind is how much older a fallback's sweep is than the newest position
// of the failed history: the writes of that span are lost. Zero when the
// copy is no fallback, the sweep is the newer, or the position is unknown.
func (r Restored) Behind() time.Duration {
	if !r.Fallback() || r.HistoryAt.IsZero() || !r.HistoryAt.After(r.SweepAt) {
		return 0
	}
	return r.HistoryAt.Sub(r.SweepAt)
}

// RestoreMaxBytes is the most RestoreFile writes of one database: a
// history or sweep copy that claims more is refused before it is written
// (an LTX snapshot of 4.5 MB whose header claimed 256 TiB had `nah
// restore` write 1.07 GB before it failed). A person's file is bounded by
// their quota (2 GiB by default) and people-1k's directory is 21 MB; `nah
// restore -max-file-bytes` states another bound.
const RestoreMaxBytes = 4 << 30

// ErrTooLarge is a restore refused because the copy would be larger than
// the bound it was given.
var ErrTooLarge = errors.New("larger than this restore allows")

// RestoreFile is RestoreFileWithin with RestoreMaxBytes.
func RestoreFile(ctx context.Context, t *Target, rel, out string, at time.Time) (Restored, error) {
	return RestoreFileWithin(ctx, t, rel, out, at, RestoreMaxBytes)
}

// RestoreFileWithin rebuilds rel at out (which must not exist) as it was
// at at (zero: newest), integrity-checked, writing at most limit bytes. A
// Litestream history that fails is reported in Restored.HistoryErr and the
// newest sound sweep copy at or before at is used; with none it returns an
// error (ErrNothing) and leaves no out.
func RestoreFileWithin(ctx context.Context, t *Target, rel, out string, at time.Time, limit int64) (Restored, error) {
	var res Restored
	if !validRel(rel) {
		return res, fmt.Errorf("not a database of nah: %q", rel)
	}
	if strings.ContainsAny(out, "?#") {
		return res, fmt.Errorf("restore to %q: the path may not hold ? or #", out)
	}
	herr := restoreHistory(ctx, t, rel, out, at, limit)
	if herr == nil {
		res.From = FromHistory
		return res, nil
	}
	removeDB(out)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if !noHistory(herr) {
		res.HistoryErr = herr
		res.HistoryTXID, res.HistoryAt = newestPosition(ctx, t, rel, at)
	}
	sweeps, err := sweepsFor(ctx, t, rel, at)
	if err != nil {
		return res, fmt.Errorf("%s: %w", rel, err)
	}
	var bad []string
	for _, sw := range sweeps {
		err := copyTo(ctx, t.store(), path.Join(sweepPrefix, sw.stamp, rel), out, limit)
		if err == nil {
			err = checkSound(ctx, out)
		}
		if err == nil {
			res.From, res.Sweep = FromSweep, sw.stamp
			res.SweepAt, _ = time.Parse(stampFormat, sw.stamp)
			return res, nil
		}
		removeDB(out)
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		bad = append(bad, "the sweep of "+sw.stamp+": "+err.Error())
	}
	switch {
	case res.HistoryErr == nil && len(bad) == 0:
		return res, fmt.Errorf("%s: %w", rel, ErrNothing)
	case res.HistoryErr == nil:
		return res, fmt.Errorf("%s: no history, and no sweep's copy is sound (%s)", rel, strings.Join(bad, "; "))
	case len(bad) == 0:
		return res, fmt.Errorf("%s: the history does not restore to a sound database (%v), and no sweep holds a copy", rel, res.HistoryErr)
	}
	return res, fmt.Errorf("%s: the history does not restore to a sound database (%v), and no sweep's copy is sound either (%s)", rel, res.HistoryErr, strings.Join(bad, "; "))
}

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
	c.local = local
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

// checkSound runs SQLite's full integrity check on the database at p,
// read-only, and says what it found first. The check's connection may
// leave an empty -wal and a -shm; they go.
func checkSound(ctx context.Context, p string) error {
	db, err := sql.Open("sqlite", "file:"+p+"?mode=ro")
	if err != nil {
		return err
	}
	var res string
	err = db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&res)
	db.Close()
	for _, q := range []string{p + "-wal", p + "-shm"} {
		if st, serr := os.Stat(q); serr == nil && (st.Size() == 0 || strings.HasSuffix(q, "-shm")) {
			os.Remove(q)
		}
	}
	if err != nil {
		return fmt.Errorf("integrity check: %w", err)
	}
	if res != "ok" {
		return fmt.Errorf("integrity check: %s", res)
	}
	return nil
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

// removeDB removes a database file that failed, with its -wal and -shm.
func removeDB(p string) {
	for _, q := range []string{p, p + "-wal", p + "-shm"} {
		os.Remove(q)
	}
}

// sweepsFor lists the complete sweeps holding rel made at or before at
// (zero: any), newest first.
func sweepsFor(ctx context.Context, t *Target, rel string, at time.Time) ([]sweepInfo, error) {
	sweeps, err := listSweeps(ctx, t.store())
	if err != nil {
		return nil, err
	}
	var out []sweepInfo
	for i := len(sweeps) - 1; i >= 0; i-- {
		sw := sweeps[i]
		if !sw.complete || !sw.files[rel] {
			continue
		}
		if !at.IsZero() {
			st, _ := time.Parse(stampFormat, sw.stamp)
			if st.After(at) {
				continue
			}
		}
		out = append(out, sw)
	}
	return out, nil
}

// clearState removes Litestream's local state of one database: after a
// restore swapped the file, the old state describes a file that is gone.
func (r *Replicator) clearState(path string) error {
	rel, err := r.rel(path)
	if err != nil {
		return err
	}
	if r.ls.FindDB(path) != nil {
		return fmt.Errorf("replication: %s is still watched", rel)
	}
	r.mu.Lock()
	if st := r.files[rel]; st != nil {
		st.shipBase = nil // the next ship reads the (cleared) local state
	}
	r.mu.Unlock()
	return os.RemoveAll(r.metaPath(rel))
}

func (r *Replicator) metaPath(rel string) string {
	return r.cfg.MetaDir + string(os.PathSeparator) + strings.ReplaceAll(rel, "/", string(os.PathSeparator))
}
