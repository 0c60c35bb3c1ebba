package mlswire_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"testing"

	"github.com/nah-app/nah/internal/mlswire"
	"github.com/nah-app/nah/mls"
)

// TestEncoder checks the encoder against package mls, the decoder the
// server runs: a KeyPackage parses and verifies with its identity and key,
// a commit of 150 Adds with a path parses with its sender, epoch and Adds,
// a Welcome names the Adds' refs, a GroupInfo its group and epoch, a
// PrivateMessage its group and epoch, an external commit its sender,
// ExternalInit, Remove and path.
func TestEncoder(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	gid := []byte("nah:owner")
	var kps [][]byte
	for i := range 150 {
		kps = append(kps, mlswire.KeyPackage(priv, "c_client"+string(rune('a'+i%26))))
	}
	kp, err := mls.ParseKeyPackage(kps[0])
	if err != nil {
		t.Fatalf("key package: %v", err)
	}
	if err := kp.Verify(); err != nil {
		t.Fatalf("key package does not verify: %v", err)
	}
	if string(kp.Leaf.Identity) != "c_clienta" || !bytes.Equal(kp.Leaf.SignatureKey, pub) || kp.CipherSuite != 1 {
		t.Fatalf("key package reads as identity %q, suite %d", kp.Leaf.Identity, kp.CipherSuite)
	}
	if ref, _ := kp.Ref(); !bytes.Equal(ref, mlswire.Ref(kps[0])) {
		t.Fatalf("kpRef %x, mls says %x", mlswire.Ref(kps[0]), ref)
	}

	m, err := mls.Parse(mlswire.Commit(gid, 7, 3, mlswire.UpdatePath(priv, "c_me", 151), mlswire.Adds(kps)...))
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	if m.WireFormat != mls.WirePublicMessage || m.ContentType != mls.ContentCommit || !bytes.Equal(m.GroupID, gid) ||
		m.Epoch != 7 || m.Sender != (mls.Sender{Type: mls.SenderMember, LeafIndex: 3}) || len(m.Commit.Proposals) != 150 {
		t.Fatalf("commit reads as %+v", m)
	}
	for i, p := range m.Commit.Proposals {
		if p.Type != mls.ProposalAdd || p.Add == nil || p.Add.Verify() != nil || !bytes.Equal(p.Add.Raw, kps[i][4:]) {
			t.Fatalf("proposal %d is not the Add of key package %d: %+v", i, i, p)
		}
	}
	if p := m.Commit.Path; p == nil || string(p.Identity) != "c_me" || !bytes.Equal(p.SignatureKey, pub) || p.Source != mls.SourceCommit {
		t.Fatalf("commit's path reads as %+v", m.Commit.Path)
	}

	w, err := mls.Parse(mlswire.Welcome(38000, mlswire.Refs(kps)...))
	if err != nil || w.Welcome == nil || len(w.Welcome.NewMembers) != 150 || !bytes.Equal(w.Welcome.NewMembers[149], mlswire.Ref(kps[149])) {
		t.Fatalf("welcome: %v %+v", err, w)
	}
	for _, tree := range []int{0, 38000} {
		g, err := mls.Parse(mlswire.GroupInfo(gid, 8, tree))
		if err != nil || g.WireFormat != mls.WireGroupInfo || !bytes.Equal(g.GroupID, gid) || g.Epoch != 8 {
			t.Fatalf("group info with a tree of %d bytes: %v %+v", tree, err, g)
		}
	}
	p, err := mls.Parse(mlswire.PrivateMessage(gid, 9))
	if err != nil || p.WireFormat != mls.WirePrivateMessage || p.ContentType != mls.ContentApplication || !bytes.Equal(p.GroupID, gid) || p.Epoch != 9 {
		t.Fatalf("private message: %v %+v", err, p)
	}
	if m, err := mls.Parse(mlswire.Commit(gid, 9, 0, nil, mlswire.Remove(5))); err != nil || m.Commit.Path != nil ||
		len(m.Commit.Proposals) != 1 || m.Commit.Proposals[0].Type != mls.ProposalRemove || m.Commit.Proposals[0].RemoveLeaf != 5 {
		t.Fatalf("a Remove of leaf 5 without a path: %v %+v", err, m)
	}
	m, err = mls.Parse(mlswire.ExternalCommit(gid, 9, mlswire.UpdatePath(priv, "c_me", 4), mlswire.Remove(2)))
	if err != nil || m.Sender.Type != mls.SenderNewMemberCommit || m.Epoch != 9 || len(m.Commit.Proposals) != 2 ||
		m.Commit.Proposals[0].Type != mls.ProposalExternalInit || m.Commit.Proposals[1].RemoveLeaf != 2 || string(m.Commit.Path.Identity) != "c_me" {
		t.Fatalf("an external commit: %v %+v", err, m)
	}
}
