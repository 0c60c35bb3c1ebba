package store

import (
	"bytes"
	"context"
	"database/sql"
	"slices"

	"github.com/nah-app/nah"
)

// AddClient registers a new MLS client of person with its signature key,
// and appends it to their key log, in one transaction.
func (s *Store) AddClient(ctx context.Context, person, name string, key []byte) (MLSClient, error) {
	if s.graph.node(person) == nil {
		return MLSClient{}, nah.ErrNoPerson()
	}
	c := MLSClient{ID: newClientID(person), SignatureKey: key, Name: name, CreatedAt: s.now().UnixMilli()}
	var size int64
	err := s.useFile(ctx, person, true, func(f *personFile) error {
		return inTx(ctx, f, func(tx *sql.Tx) error {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM mls_clients`).Scan(&n); err != nil {
				return err
			}
			if n >= MLSMaxClients {
				return nah.Errorf(nah.Conflict, "too_many_clients", "a person has at most %d clients: remove one first", MLSMaxClients)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO mls_clients(id, signature_key, name, created_at) VALUES (?, ?, ?, ?)`,
				c.ID, c.SignatureKey, c.Name, c.CreatedAt); err != nil {
				return err
			}
			var err error
			size, err = appendKeyLog(ctx, tx, KeyLogClientAdded, c.ID, key, c.CreatedAt)
			return err
		})
	})
	if err == nil {
		s.keyChanged(person, size)
	}
	return c, err
}

// Clients lists person's clients, oldest first, with their KeyPackages
// left.
func (s *Store) Clients(ctx context.Context, person string) ([]MLSClient, KeyLogHead, error) {
	var cs []MLSClient
	var head KeyLogHead
	if s.graph.node(person) == nil {
		return nil, head, nah.ErrNoPerson()
	}
	err := s.useFile(ctx, person, false, func(f *personFile) error {
		return inReadTx(ctx, f, func(tx *sql.Tx) error {
			rows, err := tx.QueryContext(ctx, `SELECT c.id, c.signature_key, c.name, c.created_at,
				(SELECT count(*) FROM mls_key_packages k WHERE k.client = c.id AND k.last_resort = 0),
				EXISTS (SELECT 1 FROM mls_key_packages k WHERE k.client = c.id AND k.last_resort = 1)
				FROM mls_clients c ORDER BY c.created_at, c.id`)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var c MLSClient
				if err := rows.Scan(&c.ID, &c.SignatureKey, &c.Name, &c.CreatedAt, &c.KeyPackages, &c.LastResort); err != nil {
					return err
				}
				cs = append(cs, c)
			}
			if err := rows.Err(); err != nil {
				return err
			}
			head, err = s.keyLogHead(ctx, tx, person)
			return err
		})
	})
	return cs, head, err
}

// RemoveClient removes client id of person: its KeyPackages go, the key
// log says so, and its leaf becomes a pending removal in every group it
// is a member of (person's own and each connection's).
func (s *Store) RemoveClient(ctx context.Context, person, id string) error {
	if s.graph.node(person) == nil {
		return nah.ErrNoPerson()
	}
	var size int64
	err := s.useFile(ctx, person, true, func(f *personFile) error {
		return inTx(ctx, f, func(tx *sql.Tx) error {
			key, err := clientKey(ctx, tx, id)
			if err != nil {
				return err
			}
			for _, q := range []string{`DELETE FROM mls_clients WHERE id = ?`, `DELETE FROM mls_key_packages WHERE client = ?`} {
				if _, err := tx.ExecContext(ctx, q, id); err != nil {
					return err
				}
			}
			if err := markRemovals(ctx, tx, `client = ?`, id, s.now().UnixMilli()); err != nil {
				return err
			}
			size, err = appendKeyLog(ctx, tx, KeyLogClientRemoved, id, key, s.now().UnixMilli())
			return err
		})
	})
	if err != nil {
		return err
	}
	s.keyChanged(person, size)
	conns, err := s.readConns(ctx, person)
	if err != nil {
		return err
	}
	for _, c := range conns {
		if err := s.useFile(ctx, c, true, func(f *personFile) error {
			return markRemovals(ctx, f.db, `client = ?`, id, s.now().UnixMilli())
		}); err != nil {
			return err
		}
	}
	return nil
}

// markRemovals makes the members of q's group that where says (with arg)
// pending removals.
func markRemovals(ctx context.Context, q querier, where, arg string, at int64) error {
	_, err := q.ExecContext(ctx, `INSERT OR IGNORE INTO mls_removals(client, at) SELECT client, ? FROM mls_members WHERE `+where, at, arg)
	return err
}

// KeyPackageUpload is one KeyPackage a client uploads, checked by the
// caller (signatures, identity, suite).
type KeyPackageUpload struct {
	Body         []byte // the MLSMessage
	SignatureKey []byte // its LeafNode's
}

// AddKeyPackages stores KeyPackages of person's client id, and replaces
// its last-resort one when lastResort is set. It returns how many
// unclaimed ones the client has then.
func (s *Store) AddKeyPackages(ctx context.Context, person, id string, kps []KeyPackageUpload, lastResort *KeyPackageUpload) (left int, hasLastResort bool, err error) {
	if s.graph.node(person) == nil {
		return 0, false, nah.ErrNoPerson()
	}
	err = s.useFile(ctx, person, true, func(f *personFile) error {
		return inTx(ctx, f, func(tx *sql.Tx) error {
			key, err := clientKey(ctx, tx, id)
			if err != nil {
				return err
			}
			all := slices.Clone(kps)
			if lastResort != nil {
				all = append(all, *lastResort)
			}
			for _, kp := range all {
				if !bytes.Equal(kp.SignatureKey, key) {
					return nah.Errorf(nah.Invalid, "wrong_signature_key", "a KeyPackage's signature key is not the one registered for client %s", id)
				}
			}
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM mls_key_packages WHERE client = ? AND last_resort = 0`, id).Scan(&left); err != nil {
				return err
			}
			if left+len(kps) > MLSMaxKeyPackages {
				return nah.Errorf(nah.Conflict, "too_many_key_packages", "a client has at most %d unclaimed KeyPackages; it has %d", MLSMaxKeyPackages, left)
			}
			now := s.now().UnixMilli()
			for _, kp := range kps {
				if _, err := tx.ExecContext(ctx, `INSERT INTO mls_key_packages(client, last_resort, body, created_at) VALUES (?, 0, ?, ?)`, id, kp.Body, now); err != nil {
					return err
				}
			}
			left += len(kps)
			if lastResort != nil {
				if _, err := tx.ExecContext(ctx, `DELETE FROM mls_key_packages WHERE client = ? AND last_resort = 1`, id); err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, `INSERT INTO mls_key_packages(client, last_resort, body, created_at) VALUES (?, 1, ?, ?)`, id, lastResort.Body, now); err != nil {
					return err
				}
			}
			return tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM mls_key_packages WHERE client = ? AND last_resort = 1)`, id).Scan(&hasLastResort)
		})
	})
	return left, hasLastResort, err
}

// ClaimedKeyPackage is one KeyPackage handed out by a claim.
type ClaimedKeyPackage struct {
	Client     string
	Body       []byte
	LastResort bool
}

// ClaimKeyPackages hands out one KeyPackage of each of person's clients,
// in one transaction: the oldest unclaimed one, deleted as it is handed
// out so that no two claims get it, or the last-resort one, which stays.
// A client with neither is left out. The caller checked who may claim.
func (s *Store) ClaimKeyPackages(ctx context.Context, person string) ([]ClaimedKeyPackage, error) {
	if s.graph.node(person) == nil {
		return nil, nah.ErrNoPerson()
	}
	var out []ClaimedKeyPackage
	err := s.useFile(ctx, person, true, func(f *personFile) error {
		out = out[:0]
		return inTx(ctx, f, func(tx *sql.Tx) error {
			rows, err := tx.QueryContext(ctx, `SELECT c.id, k.id, k.last_resort, k.body FROM mls_clients c
				JOIN mls_key_packages k ON k.id = (SELECT id FROM mls_key_packages WHERE client = c.id ORDER BY last_resort, id LIMIT 1)
				ORDER BY c.created_at, c.id`)
			if err != nil {
				return err
			}
			var used []int64
			for rows.Next() {
				var kp ClaimedKeyPackage
				var rowid int64
				if err := rows.Scan(&kp.Client, &rowid, &kp.LastResort, &kp.Body); err != nil {
					rows.Close()
					return err
				}
				if !kp.LastResort {
					used = append(used, rowid)
				}
				out = append(out, kp)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			for _, id := range used {
				if _, err := tx.ExecContext(ctx, `DELETE FROM mls_key_packages WHERE id = ?`, id); err != nil {
					return err
				}
			}
			return nil
		})
	})
	return out, err
}

// ClientKeys returns the signature key of each of person's clients.
func (s *Store) ClientKeys(ctx context.Context, person string) (map[string][]byte, error) {
	keys := map[string][]byte{}
	if s.graph.node(person) == nil {
		return nil, nah.ErrNoPerson()
	}
	err := s.useFile(ctx, person, false, func(f *personFile) error {
		rows, err := f.db.QueryContext(ctx, `SELECT id, signature_key FROM mls_clients`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var key []byte
			if err := rows.Scan(&id, &key); err != nil {
				return err
			}
			keys[id] = key
		}
		return rows.Err()
	})
	return keys, err
}
