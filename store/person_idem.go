package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/nah-app/nah"
)

// Idempotency keys (migrations/person/0004): a write sent with a
// key stores the key, the hash of what was asked and its answer in the
// person's file, in the write's own transaction. A retry with the same key
// finds the row and gets the first answer without a second write; a retry
// asking something else is refused. The row is replicated and exported
// with the file like the rest of it.

const (
	// IdemKeep is how long a key is kept at least, unless the person sends
	// more than IdemMaxKeys keys meanwhile (one every 86 s all day).
	IdemKeep = 24 * time.Hour
	// IdemMaxKeys bounds a person's keys: each write that stores one drops
	// those older than IdemKeep, then all but the newest IdemMaxKeys. A row
	// is at most MaxIdemKey + 32 + a 201 answer of < 300 bytes + ~40 of
	// b-tree, so < 600 bytes and < 600 KB a person, counted in their quota
	// as part of their database.
	IdemMaxKeys = 1000
	// MaxIdemKey is the longest key in bytes (a UUID is 36).
	MaxIdemKey = 255
)

// Idem is the idempotency key of one write. Answer makes the write's
// answer from what it created (a nah.Moment or a nah.Media); it is called
// inside the write's transaction, and what it returns is what every retry
// gets.
type Idem struct {
	Key    string
	Hash   []byte // sha256 of the route and the request's body
	Answer func(created any) []byte
}

// ValidIdemKey reports whether k can be an idempotency key: 1 to
// MaxIdemKey bytes of printable ASCII.
func ValidIdemKey(k string) bool {
	if len(k) == 0 || len(k) > MaxIdemKey {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// ErrIdemReused is the answer to a key sent again with another request.
func ErrIdemReused() error {
	return nah.Errorf(nah.Unprocessable, "idempotency_key_reused",
		"this Idempotency-Key was used for a different request: send a new key for a new request")
}

// idemFind returns the answer stored for idem's key in tx, nil if there is
// none, or ErrIdemReused if the key was used for something else.
func idemFind(ctx context.Context, tx *sql.Tx, idem *Idem) ([]byte, error) {
	var hash, answer []byte
	err := tx.QueryRowContext(ctx, `SELECT hash, answer FROM idempotency WHERE key = ?`, idem.Key).Scan(&hash, &answer)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, err
	case !bytes.Equal(hash, idem.Hash):
		return nil, ErrIdemReused()
	}
	return answer, nil
}

// idemSave stores idem with the answer to created in tx, and drops the
// keys past the bound.
func idemSave(ctx context.Context, tx *sql.Tx, idem *Idem, created any, now int64) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO idempotency(key, hash, answer, created_at) VALUES (?, ?, ?, ?)`,
		idem.Key, idem.Hash, idem.Answer(created), now); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM idempotency WHERE created_at < ?`, now-IdemKeep.Milliseconds()); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `DELETE FROM idempotency WHERE key IN (
		SELECT key FROM idempotency ORDER BY created_at DESC, key DESC LIMIT -1 OFFSET ?)`, IdemMaxKeys)
	return err
}

// IdemStored returns the hash and answer stored for key in person id's
// file; both nil when the key is new.
func (s *Store) IdemStored(ctx context.Context, id, key string) (hash, answer []byte, err error) {
	err = s.useFile(ctx, id, false, func(f *personFile) error {
		err := f.db.QueryRowContext(ctx, `SELECT hash, answer FROM idempotency WHERE key = ?`, key).Scan(&hash, &answer)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	return hash, answer, err
}
