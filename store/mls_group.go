package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/nah-app/nah"
)

// EpochError is a commit or a moment for an epoch that is not the group's:
// 409 with the group's epoch, so that the phone knows where to catch up.
type EpochError struct {
	Reason string // epoch_conflict (a commit) or stale_epoch (a moment)
	Epoch  uint64 // the group's
}

func (e *EpochError) Error() string {
	return fmt.Sprintf("%s: the group is at epoch %d", e.Reason, e.Epoch)
}

// MLSMember is one leaf of a group.
type MLSMember struct {
	Leaf   uint32
	Client string
	Person string
	Passed uint64 // the newest epoch the client has shown it holds (mls_log.go)
}

// MLSGroup is a person's group as nah keeps it.
type MLSGroup struct {
	GroupID []byte
	Epoch   uint64
	Members []MLSMember
	// PendingRemovals are member clients a commit must remove before the
	// owner's next moment: a client removed (marked in mls_removals), and
	// every leaf of a person who is neither the owner nor a connection
	// (disconnected, deleted), by construction (strangers).
	PendingRemovals []string
	// Waiting are clients of the owner and of their connections that are
	// not members: what a member's device should Add.
	Waiting []string
}

// GroupIDOf is the MLS group id of person's group.
func GroupIDOf(person string) []byte { return []byte("nah:" + person) }

func errNoGroup() error { return nah.Errorf(nah.NotFound, "no_group", "this person has no group") }

// CreateGroup registers owner's group at epoch 0 with client (the
// owner's) at leaf 0.
func (s *Store) CreateGroup(ctx context.Context, owner, client string) error {
	if s.graph.node(owner) == nil {
		return nah.ErrNoPerson()
	}
	return s.useFile(ctx, owner, true, func(f *personFile) error {
		return inTx(ctx, f, func(tx *sql.Tx) error {
			if _, err := clientKey(ctx, tx, client); err != nil {
				return nah.Errorf(nah.Invalid, "unknown_client", "client %s is not one of yours", client)
			}
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM mls_group`).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nah.Errorf(nah.Conflict, "group_exists", "you have a group already")
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO mls_group(one, group_id, epoch, created_at) VALUES (1, ?, 0, ?)`,
				GroupIDOf(owner), s.now().UnixMilli()); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO mls_members(leaf, client, person) VALUES (0, ?, ?)`, client, owner)
			return err
		})
	})
}

// readGroup reads the group of the file q is on: its epoch, members and
// pending removals.
func readGroup(ctx context.Context, q querier) (MLSGroup, error) {
	var g MLSGroup
	err := q.QueryRowContext(ctx, `SELECT group_id, epoch FROM mls_group`).Scan(&g.GroupID, &g.Epoch)
	if errors.Is(err, sql.ErrNoRows) {
		return g, errNoGroup()
	}
	if err != nil {
		return g, err
	}
	rows, err := q.QueryContext(ctx, `SELECT leaf, client, person, passed FROM mls_members ORDER BY leaf`)
	if err != nil {
		return g, err
	}
	for rows.Next() {
		var m MLSMember
		if err := rows.Scan(&m.Leaf, &m.Client, &m.Person, &m.Passed); err != nil {
			rows.Close()
			return g, err
		}
		g.Members = append(g.Members, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return g, err
	}
	rows, err = q.QueryContext(ctx, `SELECT client FROM mls_removals ORDER BY client`)
	if err != nil {
		return g, err
	}
	defer rows.Close()
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return g, err
		}
		g.PendingRemovals = append(g.PendingRemovals, c)
	}
	return g, rows.Err()
}

// strangers adds to g's pending removals the members whose person is
// neither owner nor a connection of owner: a disconnect or a deletion
// needs no mark written, so no crash can skip one. The graph answers, in
// memory once owner's connections are loaded (at most MLSMaxMembers).
func (s *Store) strangers(ctx context.Context, owner string, g *MLSGroup) error {
	for _, m := range g.Members {
		if m.Person == owner || slices.Contains(g.PendingRemovals, m.Client) {
			continue
		}
		ok, err := s.Connected(ctx, owner, m.Person)
		if err != nil {
			return err
		}
		if !ok {
			g.PendingRemovals = append(g.PendingRemovals, m.Client)
		}
	}
	slices.Sort(g.PendingRemovals)
	return nil
}

// Group returns owner's group, with the clients waiting to be added: the
// owner's and their connections' that are not members (a file read for
// each connection).
func (s *Store) Group(ctx context.Context, owner string) (MLSGroup, error) {
	var g MLSGroup
	if s.graph.node(owner) == nil {
		return g, nah.ErrNoPerson()
	}
	err := s.useFile(ctx, owner, false, func(f *personFile) error {
		var err error
		g, err = readGroup(ctx, f.db)
		if err != nil {
			return err
		}
		return s.strangers(ctx, owner, &g)
	})
	if err != nil {
		return g, err
	}
	conns, err := s.readConns(ctx, owner)
	if err != nil {
		return g, err
	}
	for _, p := range append([]string{owner}, conns...) {
		keys, err := s.ClientKeys(ctx, p)
		if err != nil {
			return g, err
		}
		for c := range keys {
			if !slices.ContainsFunc(g.Members, func(m MLSMember) bool { return m.Client == c }) {
				g.Waiting = append(g.Waiting, c)
			}
		}
	}
	slices.Sort(g.Waiting)
	return g, nil
}

// MLSAdd is a client a commit adds, with the signature key of its
// KeyPackage.
type MLSAdd struct {
	Client       string
	SignatureKey []byte
}

// MLSCommit is what nah reads of a commit (app/mls_group.go parses it).
type MLSCommit struct {
	Epoch      uint64 // the commit's, the group's current one
	SenderLeaf uint32 // a member's commit
	// External is a commit by a new member from the GroupInfo (RFC 9420
	// §12.4.3.2): its sender is the client of its path, which joins.
	External  bool
	Removes   []uint32
	Adds      []MLSAdd
	Body      []byte // the MLSMessage, stored as it came
	GroupInfo []byte // the GroupInfo of the new epoch, or nil
	Welcome   []byte // or nil
	WelcomeTo []string
	// PathClient and PathKey are the identity and signature key of the
	// committer's new LeafNode when the commit has an UpdatePath: they
	// must be the sender's client and its registered key.
	PathClient string
	PathKey    []byte
}

// Commit applies commit c of caller to owner's group: accepted only at
// the group's epoch (the first commit wins, any other is an EpochError),
// from a member leaf of one of caller's clients, or external from one of
// caller's clients that joins (removing its own old leaf at most).
// Removes, then Adds each at the leftmost free leaf (RFC 9420 §12.1); an
// Add must name a client of the owner or of a connection, with its
// registered key. The log is then pruned (pruneCommits), and the Welcome
// goes to the inbox of each client in c.WelcomeTo. It returns the new
// epoch.
func (s *Store) Commit(ctx context.Context, owner, caller string, c MLSCommit) (uint64, error) {
	if s.graph.node(owner) == nil {
		return 0, nah.ErrNoPerson()
	}
	if err := s.checkAdds(ctx, owner, c.Adds); err != nil {
		return 0, err
	}
	var callerKeys map[string][]byte
	if c.PathKey != nil {
		var err error
		if callerKeys, err = s.ClientKeys(ctx, caller); err != nil {
			return 0, err
		}
	}
	var epoch uint64
	err := s.useFile(ctx, owner, true, func(f *personFile) error {
		return inTx(ctx, f, func(tx *sql.Tx) error {
			g, err := readGroup(ctx, tx)
			if err != nil {
				return err
			}
			if err := s.strangers(ctx, owner, &g); err != nil {
				return err
			}
			if c.Epoch != g.Epoch {
				return &EpochError{Reason: "epoch_conflict", Epoch: g.Epoch}
			}
			leaves := map[uint32]MLSMember{}
			for _, m := range g.Members {
				leaves[m.Leaf] = m
			}
			epoch = g.Epoch + 1
			var sender MLSMember
			if c.External {
				if string(callerKeys[c.PathClient]) != string(c.PathKey) {
					return nah.Errorf(nah.Forbidden, "not_your_client", "an external commit's new leaf is one of your clients with its registered key")
				}
				sender = MLSMember{Client: c.PathClient, Person: caller}
			} else {
				m, ok := leaves[c.SenderLeaf]
				if !ok || m.Person != caller || slices.Contains(g.PendingRemovals, m.Client) {
					return nah.Errorf(nah.Forbidden, "not_your_leaf", "leaf %d of this group is not one of your clients", c.SenderLeaf)
				}
				if c.PathKey != nil && (c.PathClient != m.Client || string(callerKeys[m.Client]) != string(c.PathKey)) {
					return nah.Errorf(nah.Invalid, "wrong_signature_key", "the commit's new leaf is not client %s with its registered key", m.Client)
				}
				sender = m
			}
			for _, l := range c.Removes {
				m, ok := leaves[l]
				if !ok {
					return nah.Errorf(nah.Invalid, "bad_remove", "the commit removes leaf %d, which is blank", l)
				}
				if c.External && m.Client != sender.Client {
					return nah.Errorf(nah.Forbidden, "not_your_leaf", "an external commit removes only its sender's old leaf, not leaf %d", l)
				}
				delete(leaves, l)
			}
			adds := c.Adds
			if c.External {
				adds = []MLSAdd{{Client: sender.Client}}
			}
			for _, a := range adds {
				for _, m := range leaves {
					if m.Client == a.Client {
						return nah.Errorf(nah.Invalid, "already_member", "client %s is a member already", a.Client)
					}
				}
				if len(leaves) >= MLSMaxMembers {
					return nah.Errorf(nah.Conflict, "group_full", "a group has at most %d members", MLSMaxMembers)
				}
				var l uint32
				for _, taken := leaves[l]; taken; _, taken = leaves[l] {
					l++
				}
				p, _ := ClientPerson(a.Client)
				leaves[l] = MLSMember{Leaf: l, Client: a.Client, Person: p, Passed: epoch}
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM mls_members`); err != nil {
				return err
			}
			// A client added holds the new epoch from its Welcome; the
			// committer and an external joiner have passed only the old
			// one until they fetch after the new: an answer lost, they
			// find their commit in the log.
			for _, m := range leaves {
				if m.Client == sender.Client {
					m.Passed = min(m.Passed, g.Epoch)
				}
				if _, err := tx.ExecContext(ctx, `INSERT INTO mls_members(leaf, client, person, passed) VALUES (?, ?, ?, ?)`, m.Leaf, m.Client, m.Person, m.Passed); err != nil {
					return err
				}
			}
			now := s.now().UnixMilli()
			stmts := []struct {
				q    string
				args []any
			}{
				{`DELETE FROM mls_removals WHERE client NOT IN (SELECT client FROM mls_members)`, nil},
				// A commit without a GroupInfo drops the older one: a client
				// joining from it would be refused at the wrong epoch.
				{`UPDATE mls_group SET epoch = ?, group_info = ?`, []any{epoch, c.GroupInfo}},
				{`INSERT INTO mls_commits(epoch, body, created_at) VALUES (?, ?, ?)`, []any{epoch, c.Body, now}},
			}
			for _, st := range stmts {
				if _, err := tx.ExecContext(ctx, st.q, st.args...); err != nil {
					return err
				}
			}
			return s.pruneCommits(ctx, tx, epoch)
		})
	})
	if err != nil {
		return 0, err
	}
	// The commit stands; a Welcome not delivered leaves its client in the
	// group without knowing it, and a member's device adds it again after
	// removing it (the recovery in docs/api.md).
	for _, to := range c.WelcomeTo {
		if err := s.deliverWelcome(ctx, to, owner, epoch, c.Welcome); err != nil {
			s.log.Warn("a Welcome could not be delivered", "client", to, "err", err)
		}
	}
	return epoch, nil
}

// checkAdds refuses Adds of clients that are not the owner's or a
// connection's, or whose key is not the one registered.
func (s *Store) checkAdds(ctx context.Context, owner string, adds []MLSAdd) error {
	keys := map[string]map[string][]byte{}
	for _, a := range adds {
		p, ok := ClientPerson(a.Client)
		if !ok {
			return nah.Errorf(nah.Forbidden, "not_a_connection", "the commit adds %.64q, which is no client of nah's", a.Client)
		}
		if _, seen := keys[p]; !seen {
			if p != owner {
				if ok, err := s.Connected(ctx, owner, p); err != nil {
					return err
				} else if !ok {
					return nah.Errorf(nah.Forbidden, "not_a_connection", "the commit adds client %s of someone who is not a connection", a.Client)
				}
			}
			ks, err := s.ClientKeys(ctx, p)
			if err != nil {
				return err
			}
			keys[p] = ks
		}
		key, ok := keys[p][a.Client]
		if !ok {
			return nah.Errorf(nah.Invalid, "unknown_client", "the commit adds client %s, which is not registered", a.Client)
		}
		if string(key) != string(a.SignatureKey) {
			return nah.Errorf(nah.Invalid, "wrong_signature_key", "the commit adds client %s with a key that is not its registered one", a.Client)
		}
	}
	return nil
}
