package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/nah-app/nah"
)

// MLS: nah is the delivery service of one group a person, and
// keeps each person's clients, their KeyPackages and the key log
// (migrations/person/0006_mls.sql). The bounds, each a 4xx when reached:
const (
	// MLSMaxClients a person: a phone and a tablet or two, with room.
	MLSMaxClients = 8
	// MLSMaxKeyPackages unclaimed a client: a connection claims one each,
	// and a phone tops the stock up when it comes online.
	MLSMaxKeyPackages = 100
	// MLSKeyPackageMaxBytes bounds one KeyPackage: suite 1's are ~300
	// bytes (ts-mls), the rest is room for extensions.
	MLSKeyPackageMaxBytes = 16 << 10
	// MLSCommitMaxBytes bounds a commit: one adding the 1,208 clients of
	// a person and 150 connections at ~350 bytes a KeyPackage is ~420 KB.
	MLSCommitMaxBytes = 512 << 10
	// MLSWelcomeMaxBytes and MLSGroupInfoMaxBytes: both may carry the
	// ratchet tree, ~250 bytes a leaf and ~100 a parent at 1,208 leaves.
	MLSWelcomeMaxBytes   = 512 << 10
	MLSGroupInfoMaxBytes = 512 << 10
	// MLSCommitsKept is the most commits a group keeps, a hard cap over
	// the pruning by members and by age (mls_log.go); a member further
	// behind starts again from the GroupInfo.
	MLSCommitsKept = 1000
	// MLSCommitMaxAge prunes a commit even when a member has not passed
	// it: SessionIdle, since a phone unused that long has no session and
	// joins again as a new one; a shorter bound would cost a phone back
	// from a long trip the moments of the epochs it missed.
	MLSCommitMaxAge = SessionIdle
	// MLSInboxMax Welcomes wait for a client; a Welcome replaces an older
	// one into the same group, and past the bound the oldest goes.
	MLSInboxMax = 64
	// MLSKeyLogMax entries a person: each is a client added or removed,
	// a chain that cannot be cut without phones noticing.
	MLSKeyLogMax = 4096
	// MLSMaxMembers a group: every client of the owner and of each of
	// their connections.
	MLSMaxMembers = MLSMaxClients * (nah.MaxConnections + 1)
)

// MLSClient is one MLS client of a person: a phone or tablet.
type MLSClient struct {
	ID           string
	SignatureKey []byte
	Name         string
	CreatedAt    int64
	KeyPackages  int  // unclaimed, the last-resort one not counted
	LastResort   bool // a last-resort KeyPackage is stored
}

// A client id names its person: "c_" + person id + "_" + 16 hex digits,
// so that a commit's Add (a KeyPackage whose identity is the client id)
// says whose client it names without a directory index.
const (
	clientIDPrefix = "c_"
	clientIDLen    = len(clientIDPrefix) + nah.IDLen + 1 + 16
)

func newClientID(person string) string {
	var b [8]byte
	rand.Read(b[:])
	return clientIDPrefix + person + "_" + hex.EncodeToString(b[:])
}

// ClientPerson returns the person whose client id is, or false when id is
// not the shape of a client id.
func ClientPerson(id string) (string, bool) {
	if len(id) != clientIDLen || !strings.HasPrefix(id, clientIDPrefix) || id[clientIDLen-17] != '_' {
		return "", false
	}
	p := id[len(clientIDPrefix) : len(clientIDPrefix)+nah.IDLen]
	if !nah.ValidPersonID(p) {
		return "", false
	}
	if _, err := hex.DecodeString(id[clientIDLen-16:]); err != nil || strings.ToLower(id[clientIDLen-16:]) != id[clientIDLen-16:] {
		return "", false
	}
	return p, true
}

func errNoClient() error { return nah.Errorf(nah.NotFound, "", "no such client") }

// clientKey returns the signature key of client id in f, or errNoClient.
func clientKey(ctx context.Context, q querier, id string) ([]byte, error) {
	var key []byte
	err := q.QueryRowContext(ctx, `SELECT signature_key FROM mls_clients WHERE id = ?`, id).Scan(&key)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNoClient()
	}
	return key, err
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// inTx runs fn in a transaction on f's database.
func inTx(ctx context.Context, f *personFile, fn func(tx *sql.Tx) error) error {
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}
