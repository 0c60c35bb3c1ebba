package backup

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"fmt"
	"hash"
	"math"
	"strings"
)

// Checksum is what the restore drill compares of two copies of a database:
// the schema, and every table's row count and a SHA-256 of its rows in key
// order. Litestream's own tables (_litestream_seq, which it writes on its
// own) are left out.
type Checksum struct {
	Tables []TableSum // the schema first, then the tables by name
}

// TableSum is one table's part of a Checksum.
type TableSum struct {
	Name string
	Rows int64
	Sum  [sha256.Size]byte
}

// schemaName is the Checksum entry of the schema and user_version.
const schemaName = "(schema)"

// ChecksumTx reads every row of the database tx reads, in one transaction,
// and sums it up. Rows are streamed: memory is one row at a time (a moment
// is at most NAH_MAX_MOMENT_BYTES).
func ChecksumTx(ctx context.Context, tx *sql.Tx) (Checksum, error) {
	var d Checksum
	sh := sha256.New()
	var uv int64
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&uv); err != nil {
		return d, err
	}
	putValue(sh, uv)
	rows, err := tx.QueryContext(ctx, `SELECT type, name, coalesce(sql, '') FROM sqlite_schema
		WHERE name NOT LIKE 'sqlite_%' AND name NOT LIKE '\_litestream%' ESCAPE '\' ORDER BY type, name`)
	if err != nil {
		return d, err
	}
	var tables []string
	var n int64
	for rows.Next() {
		var typ, name, def string
		if err := rows.Scan(&typ, &name, &def); err != nil {
			rows.Close()
			return d, err
		}
		putValue(sh, typ)
		putValue(sh, name)
		putValue(sh, def)
		n++
		if typ == "table" {
			tables = append(tables, name)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return d, err
	}
	s := TableSum{Name: schemaName, Rows: n}
	sh.Sum(s.Sum[:0])
	d.Tables = append(d.Tables, s)
	for _, tb := range tables {
		s, err := sumTable(ctx, tx, tb)
		if err != nil {
			return d, fmt.Errorf("table %s: %w", tb, err)
		}
		d.Tables = append(d.Tables, s)
	}
	return d, nil
}

// sumTable sums one table's rows in key order: rowid for an ordinary
// table (the rowid is summed too), the primary key for a WITHOUT ROWID one,
// so that two copies holding the same rows give the same sum.
func sumTable(ctx context.Context, tx *sql.Tx, name string) (TableSum, error) {
	s := TableSum{Name: name}
	q := `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
	var withoutRowid bool
	if err := tx.QueryRowContext(ctx, `SELECT wr FROM pragma_table_list WHERE schema = 'main' AND name = ?`, name).Scan(&withoutRowid); err != nil {
		return s, err
	}
	stmt := "SELECT rowid, * FROM " + q + " ORDER BY rowid"
	if withoutRowid {
		rows, err := tx.QueryContext(ctx, `SELECT name FROM pragma_table_info(?) WHERE pk > 0 ORDER BY pk`, name)
		if err != nil {
			return s, err
		}
		var keys []string
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				rows.Close()
				return s, err
			}
			keys = append(keys, `"`+strings.ReplaceAll(k, `"`, `""`)+`"`)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return s, err
		}
		stmt = "SELECT * FROM " + q + " ORDER BY " + strings.Join(keys, ", ")
	}
	rows, err := tx.QueryContext(ctx, stmt)
	if err != nil {
		return s, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return s, err
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	sh := sha256.New()
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return s, err
		}
		for _, v := range vals {
			putValue(sh, v)
		}
		s.Rows++
		if s.Rows%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return s, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	sh.Sum(s.Sum[:0])
	return s, nil
}

// putValue adds one SQLite value to h, typed and length-prefixed so that
// no two different rows hash alike by running values together.
func putValue(h hash.Hash, v any) {
	var b [9]byte
	switch x := v.(type) {
	case nil:
		h.Write([]byte{0})
	case int64:
		b[0] = 1
		binary.BigEndian.PutUint64(b[1:], uint64(x))
		h.Write(b[:])
	case float64:
		b[0] = 2
		binary.BigEndian.PutUint64(b[1:], math.Float64bits(x))
		h.Write(b[:])
	case string:
		b[0] = 3
		binary.BigEndian.PutUint64(b[1:], uint64(len(x)))
		h.Write(b[:])
		h.Write([]byte(x))
	case []byte:
		b[0] = 4
		binary.BigEndian.PutUint64(b[1:], uint64(len(x)))
		h.Write(b[:])
		h.Write(x)
	case bool:
		b[0] = 1
		if x {
			b[8] = 1
		}
		h.Write(b[:])
	default:
		fmt.Fprintf(h, "\x05%T:%v", x, x)
	}
}

// Diff says in a phrase how the copy other differs from d, the live
// file ("" when they are the same): the first table with another row
// count, or else the first whose rows differ.
func (d Checksum) Diff(other Checksum) string {
	by := make(map[string]TableSum, len(other.Tables))
	for _, t := range other.Tables {
		by[t.Name] = t
	}
	for _, t := range d.Tables {
		o, ok := by[t.Name]
		switch {
		case !ok:
			return fmt.Sprintf("table %s is missing from the replica", t.Name)
		case t.Name == schemaName && o.Sum != t.Sum:
			return "the schema differs"
		case o.Rows != t.Rows:
			return fmt.Sprintf("%s has %d %s on the replica and %d in the live file", t.Name, o.Rows, plural(o.Rows, "row", "rows"), t.Rows)
		case o.Sum != t.Sum:
			return fmt.Sprintf("%s has the same %d %s on both sides but their contents differ", t.Name, t.Rows, plural(t.Rows, "row", "rows"))
		}
		delete(by, t.Name)
	}
	for name := range by {
		return fmt.Sprintf("the replica has a table %s the live file does not", name)
	}
	return ""
}

// Equal says whether the two checksums are the same.
func (d Checksum) Equal(other Checksum) bool {
	return len(d.Tables) == len(other.Tables) && d.Diff(other) == ""
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
