package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"

	"github.com/nah-app/nah"
)

// Once a person has a group, a moment is an MLS PrivateMessage of it at
// its epoch. The post's one statement (insertMoment) inserts only when
// the file has no group, so a person without one pays nothing more; with
// one, mlsMoment checks the message's clear header first.

// plainInsertMoment is insertMoment without its condition.
const plainInsertMoment = `INSERT INTO moments(id, created_at, body) VALUES (?, ?, ?)`

// PrivateMessageHeader reads the clear header of an MLSMessage holding a
// PrivateMessage (RFC 9420 §6): version mls10, wire format 2, group_id,
// epoch and content type. ok is false for anything else.
func PrivateMessageHeader(b []byte) (groupID []byte, epoch uint64, contentType uint8, ok bool) {
	if len(b) < 5 || b[0] != 0 || b[1] != 1 || b[2] != 0 || b[3] != 2 {
		return nil, 0, 0, false
	}
	b = b[4:]
	n, size := 0, 0
	switch b[0] >> 6 {
	case 0:
		n, size = int(b[0]&0x3f), 1
	case 1:
		if len(b) < 2 {
			return nil, 0, 0, false
		}
		n, size = int(binary.BigEndian.Uint16(b)&0x3fff), 2
	case 2:
		if len(b) < 4 {
			return nil, 0, 0, false
		}
		n, size = int(binary.BigEndian.Uint32(b)&0x3fffffff), 4
	default:
		return nil, 0, 0, false
	}
	b = b[size:]
	if len(b) < n+9 {
		return nil, 0, 0, false
	}
	return b[:n], binary.BigEndian.Uint64(b[n:]), b[n+8], true
}

// MomentEpoch is the epoch of an author's moment when its body is a
// PrivateMessage of the author's group (the feed shows it), else false.
func MomentEpoch(author string, body []byte) (uint64, bool) {
	g, epoch, _, ok := PrivateMessageHeader(body)
	if !ok || len(g) != 4+len(author) || string(g[4:]) != author || string(g[:4]) != "nah:" {
		return 0, false
	}
	return epoch, true
}

// mlsMoment inserts moment m of author, whose file has a group, after
// checking it: an application PrivateMessage of the group, at its epoch,
// with no removal pending (strangers included).
func (s *Store) mlsMoment(ctx context.Context, tx *sql.Tx, m nah.Moment, body []byte) error {
	g, err := readGroup(ctx, tx)
	if err != nil {
		return err
	}
	if err := s.strangers(ctx, m.Author, &g); err != nil {
		return err
	}
	gid, epoch, ct, ok := PrivateMessageHeader(body)
	switch {
	case !ok || ct != 1:
		return nah.Errorf(nah.Invalid, "not_private_message", "you have a group: a moment is an MLS PrivateMessage (application) of it")
	case !bytes.Equal(gid, g.GroupID):
		return nah.Errorf(nah.Invalid, "wrong_group", "the moment is for another group than yours")
	case len(g.PendingRemovals) > 0:
		return nah.Errorf(nah.Conflict, "removal_pending", "commit the removal of %d clients from your group first (%s)", len(g.PendingRemovals), g.PendingRemovals[0])
	case epoch != g.Epoch:
		return &EpochError{Reason: "stale_epoch", Epoch: g.Epoch}
	}
	_, err = tx.ExecContext(ctx, plainInsertMoment, m.ID, m.CreatedAt, body)
	return err
}
