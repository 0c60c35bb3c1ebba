package store

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/nah-app/nah"
)

// The key log: each person's clients added and removed, in order, as a
// hash chain, hash_n = SHA-256(hash_{n-1} || KeyLogEntryBytes(entry n)),
// hash_0 = 32 zero bytes. Its head (size, hash) is signed with the
// server's Ed25519 key (KeyLogHeadBytes). A phone pins a head and checks
// that the next one extends it: a key added or swapped behind the API
// (in the file, offline) either breaks the chain or is a new entry the
// phones see.

// Key log entry kinds.
const (
	KeyLogClientAdded   = "client_added"
	KeyLogClientRemoved = "client_removed"
)

// KeyLogEntry is one entry of a person's key log.
type KeyLogEntry struct {
	Pos          int64
	Kind         string
	Client       string
	SignatureKey []byte
	At           int64 // unix ms
	Hash         []byte
}

// KeyLogHead is the newest position and hash of a person's key log,
// with the server's signature of them.
type KeyLogHead struct {
	Size      int64
	Hash      []byte
	Signature []byte
}

// KeyLogEntryBytes is an entry's canonical encoding: its kind (1 added,
// 2 removed), the client id (1-byte length), the signature key (2-byte
// big-endian length) and its time (8 bytes, unix ms, big-endian).
func KeyLogEntryBytes(kind, client string, key []byte, at int64) []byte {
	k := byte(1)
	if kind == KeyLogClientRemoved {
		k = 2
	}
	b := make([]byte, 0, 1+1+len(client)+2+len(key)+8)
	b = append(b, k, byte(len(client)))
	b = append(b, client...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(key)))
	b = append(b, key...)
	return binary.BigEndian.AppendUint64(b, uint64(at))
}

// KeyLogHeadBytes is what the server signs of a head: "nah key log v1",
// the person id, the size (8 bytes big-endian) and the hash.
func KeyLogHeadBytes(person string, size int64, hash []byte) []byte {
	b := append([]byte("nah key log v1"), person...)
	b = binary.BigEndian.AppendUint64(b, uint64(size))
	return append(b, hash...)
}

// KeyLogPublicKey is the key that verifies every head's signature.
func (s *Store) KeyLogPublicKey() ed25519.PublicKey {
	return s.keyLogKey.Public().(ed25519.PublicKey)
}

// loadKeyLogKey reads the key log's signing key from the directory's
// meta table, making it on the first start: it travels with the
// directory's backups, so a restored server signs with the same key.
func (s *Store) loadKeyLogKey(ctx context.Context) error {
	seed := make([]byte, ed25519.SeedSize)
	rand.Read(seed)
	if _, err := s.w.ExecContext(ctx, `INSERT OR IGNORE INTO meta(key, value) VALUES ('key_log_key', ?)`, seed); err != nil {
		return fmt.Errorf("store: key log key: %w", err)
	}
	if err := s.w.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'key_log_key'`).Scan(&seed); err != nil {
		return fmt.Errorf("store: key log key: %w", err)
	}
	if len(seed) != ed25519.SeedSize {
		return fmt.Errorf("store: key log key: %d bytes, want %d", len(seed), ed25519.SeedSize)
	}
	s.keyLogKey = ed25519.NewKeyFromSeed(seed)
	return nil
}

// appendKeyLog appends an entry to the key log in tx and returns the
// log's size after it.
func appendKeyLog(ctx context.Context, tx *sql.Tx, kind, client string, key []byte, at int64) (int64, error) {
	var pos int64
	prev := make([]byte, sha256.Size)
	err := tx.QueryRowContext(ctx, `SELECT pos, hash FROM mls_key_log ORDER BY pos DESC LIMIT 1`).Scan(&pos, &prev)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, err
	}
	if pos >= MLSKeyLogMax {
		return 0, nah.Errorf(nah.Conflict, "key_log_full", "the key log has %d entries, the most a person may have", MLSKeyLogMax)
	}
	h := sha256.New()
	h.Write(prev)
	h.Write(KeyLogEntryBytes(kind, client, key, at))
	_, err = tx.ExecContext(ctx, `INSERT INTO mls_key_log(pos, kind, client, signature_key, at, hash) VALUES (?, ?, ?, ?, ?, ?)`,
		pos+1, kind, client, key, at, h.Sum(nil))
	return pos + 1, err
}

// OnKeyChange sets f to be called after each committed change of a
// person's key log, with the log's size after it (the push to the
// person's devices, digest.Loop.KeyChanged). f must not block.
func (s *Store) OnKeyChange(f func(person string, size int64)) { s.keyChange.Store(&f) }

// keyChanged calls the OnKeyChange function, if any.
func (s *Store) keyChanged(person string, size int64) {
	if f := s.keyChange.Load(); f != nil {
		(*f)(person, size)
	}
}

// keyLogHead reads and signs person's key log head.
func (s *Store) keyLogHead(ctx context.Context, q querier, person string) (KeyLogHead, error) {
	head := KeyLogHead{Hash: make([]byte, sha256.Size)}
	err := q.QueryRowContext(ctx, `SELECT pos, hash FROM mls_key_log ORDER BY pos DESC LIMIT 1`).Scan(&head.Size, &head.Hash)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return KeyLogHead{}, err
	}
	head.Signature = ed25519.Sign(s.keyLogKey, KeyLogHeadBytes(person, head.Size, head.Hash))
	return head, nil
}

// KeyLogPageSize is how many entries a page of the key log has.
const KeyLogPageSize = 500

// KeyLog returns up to KeyLogPageSize entries of person's key log after
// position after, and the signed head.
func (s *Store) KeyLog(ctx context.Context, person string, after int64) ([]KeyLogEntry, KeyLogHead, error) {
	return s.readKeyLog(ctx, person, `WHERE pos > ? ORDER BY pos LIMIT ?`, after, KeyLogPageSize)
}

// KeyLogNewest returns the newest n entries of person's key log, newest
// first, and its head: the console's person page shows them (n is its
// bound, 20).
func (s *Store) KeyLogNewest(ctx context.Context, person string, n int) ([]KeyLogEntry, KeyLogHead, error) {
	return s.readKeyLog(ctx, person, `ORDER BY pos DESC LIMIT ?`, n)
}

// readKeyLog reads the entries of person's key log that where (the query's
// tail, with args) selects, and the signed head, as one state of the file.
func (s *Store) readKeyLog(ctx context.Context, person, where string, args ...any) (entries []KeyLogEntry, head KeyLogHead, err error) {
	if s.graph.node(person) == nil {
		return nil, head, nah.ErrNoPerson()
	}
	err = s.useFile(ctx, person, false, func(f *personFile) error {
		return inReadTx(ctx, f, func(tx *sql.Tx) error {
			rows, err := tx.QueryContext(ctx, `SELECT pos, kind, client, signature_key, at, hash FROM mls_key_log `+where, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var e KeyLogEntry
				if err := rows.Scan(&e.Pos, &e.Kind, &e.Client, &e.SignatureKey, &e.At, &e.Hash); err != nil {
					return err
				}
				entries = append(entries, e)
			}
			if err := rows.Err(); err != nil {
				return err
			}
			head, err = s.keyLogHead(ctx, tx, person)
			return err
		})
	})
	return entries, head, err
}

// inReadTx runs fn in a read transaction on f's database: what it reads
// is one state of the file.
func inReadTx(ctx context.Context, f *personFile, fn func(tx *sql.Tx) error) error {
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	return fn(tx)
}
