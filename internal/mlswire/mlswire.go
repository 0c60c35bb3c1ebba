// Package mlswire writes the few RFC 9420 (MLS) messages that the app's
// tests and the bench send to nah, as a phone's MLS library would. The
// server never imports it: it only decodes (package mls), and this encoder is
// written apart from that decoder so that a fault in one is not copied into
// the other (mlswire_test.go checks one against the other).
//
// Suite 1 only (X25519, AES-128-GCM, SHA-256, Ed25519). KeyPackage
// signatures are real, since nah verifies them; everything nah cannot check
// (a commit's signature and tags, HPKE ciphertexts, path secrets) is random
// filler of the size a real client sends for suite 1.
package mlswire

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
)

// Cat joins parts.
func Cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// U16, U32 and U64 are big-endian integers.
func U16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func U32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func U64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// Vec is opaque<V>: the parts joined, after their length in the shortest
// variable-length form (RFC 9420 §2.1.2).
func Vec(parts ...[]byte) []byte {
	b := Cat(parts...)
	switch l := len(b); {
	case l < 1<<6:
		return append([]byte{byte(l)}, b...)
	case l < 1<<14:
		return append(U16(uint16(l)|0x4000), b...)
	default:
		return append(U32(uint32(l)|0x80000000), b...)
	}
}

// Filler is n random bytes, for what nah cannot check.
func Filler(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// SignWithLabel is SignWithLabel (RFC 9420 §5.1.2) with Ed25519.
func SignWithLabel(priv ed25519.PrivateKey, label string, content []byte) []byte {
	return ed25519.Sign(priv, Cat(Vec([]byte("MLS 1.0 "+label)), Vec(content)))
}

// Message is an MLSMessage (version mls10) of wire format wire.
func Message(wire uint16, body ...[]byte) []byte { return Cat(U16(1), U16(wire), Cat(body...)) }

// capabilities says mls10, suite 1, basic credentials.
func capabilities() []byte {
	return Cat(Vec(U16(1)), Vec(U16(1)), Vec(), Vec(), Vec(U16(1)))
}

// RawKeyPackage is a KeyPackage (suite 1) whose BasicCredential's identity
// is identity, signed (LeafNodeTBS and KeyPackageTBS) by priv.
func RawKeyPackage(priv ed25519.PrivateKey, identity string) []byte {
	pub := priv.Public().(ed25519.PublicKey)
	leafTBS := Cat(Vec(Filler(32)), Vec(pub), U16(1), Vec([]byte(identity)), capabilities(),
		[]byte{1}, U64(0), U64(1<<40), Vec()) // source key_package, lifetime, no extensions
	tbs := Cat(U16(1), U16(1), Vec(Filler(32)), leafTBS, Vec(SignWithLabel(priv, "LeafNodeTBS", leafTBS)), Vec())
	return Cat(tbs, Vec(SignWithLabel(priv, "KeyPackageTBS", tbs)))
}

// KeyPackage is RawKeyPackage in its MLSMessage, as a phone uploads it.
func KeyPackage(priv ed25519.PrivateKey, identity string) []byte {
	return Message(5, RawKeyPackage(priv, identity))
}

// Ref is the KeyPackageRef (RFC 9420 §5.2) of the KeyPackage in the
// MLSMessage m.
func Ref(m []byte) []byte {
	h := sha256.Sum256(Cat(Vec([]byte("MLS 1.0 KeyPackage Reference")), Vec(m[4:])))
	return h[:]
}

// Adds are the inline Add proposals of the KeyPackages kps (MLSMessages).
func Adds(kps [][]byte) (ps [][]byte) {
	for _, kp := range kps {
		ps = append(ps, Add(kp))
	}
	return ps
}

// Refs are the KeyPackageRefs of kps, which a Welcome for them names.
func Refs(kps [][]byte) (rs [][]byte) {
	for _, kp := range kps {
		rs = append(rs, Ref(kp))
	}
	return rs
}

// Add is an inline Add proposal of the KeyPackage in the MLSMessage m;
// Remove one of leaf.
func Add(m []byte) []byte       { return Cat([]byte{1}, U16(1), m[4:]) }
func Remove(leaf uint32) []byte { return Cat([]byte{1}, U16(3), U32(leaf)) }

// UpdatePath is the committer's new leaf (source commit) and one
// UpdatePathNode a level of a tree of members leaves, each encrypted to
// one copath node: what a commit with a path carries.
func UpdatePath(priv ed25519.PrivateKey, client string, members int) []byte {
	pub := priv.Public().(ed25519.PublicKey)
	leaf := Cat(Vec(Filler(32)), Vec(pub), U16(1), Vec([]byte(client)), capabilities(),
		[]byte{3}, Vec(Filler(32)), Vec()) // source commit, parent hash, no extensions
	leaf = Cat(leaf, Vec(Filler(64))) // its signature: nah does not check it
	var nodes [][]byte
	for n := 1; n < members; n *= 2 {
		// HPKE: a 32-byte KEM output, the 32-byte path secret sealed with a 16-byte tag.
		nodes = append(nodes, Cat(Vec(Filler(32)), Vec(Cat(Vec(Filler(32)), Vec(Filler(48))))))
	}
	return Cat([]byte{1}, leaf, Vec(nodes...))
}

// Commit is a PublicMessage commit to group gid at epoch, sent by the
// member at leaf, with proposals inline and path (nil for none). The
// signature, confirmation tag and membership tag are filler of their sizes
// (64, 32, 32 bytes): nah keeps no group secrets and cannot check them.
func Commit(gid []byte, epoch uint64, leaf uint32, path []byte, proposals ...[]byte) []byte {
	if path == nil {
		path = []byte{0}
	}
	return Message(1, Vec(gid), U64(epoch), []byte{1}, U32(leaf), Vec(), []byte{3},
		Vec(proposals...), path, Vec(Filler(64)), Vec(Filler(32)), Vec(Filler(32)))
}

// ExternalCommit is a PublicMessage commit to group gid at epoch by a
// new member from the GroupInfo (sender new_member_commit, RFC 9420
// §12.4.3.2): an ExternalInit of a 32-byte KEM output, then proposals
// (its old leaf's Remove, to resync), and path, its new leaf. A
// non-member's message has no membership tag.
func ExternalCommit(gid []byte, epoch uint64, path []byte, proposals ...[]byte) []byte {
	init := Cat([]byte{1}, U16(6), Vec(Filler(32)))
	return Message(1, Vec(gid), U64(epoch), []byte{4}, Vec(), []byte{3},
		Vec(append([][]byte{init}, proposals...)...), path, Vec(Filler(64)), Vec(Filler(32)))
}

// Welcome is a Welcome for the KeyPackages whose refs are given, with an
// encrypted GroupInfo of infoBytes: each EncryptedGroupSecrets has a
// 32-byte KEM output and the GroupSecrets (joiner secret, no path secret,
// no PSKs) sealed with a 16-byte tag.
func Welcome(infoBytes int, refs ...[]byte) []byte {
	var secrets [][]byte
	for _, r := range refs {
		secrets = append(secrets, Cat(Vec(r), Vec(Filler(32)), Vec(Filler(36+16))))
	}
	return Message(3, U16(1), Vec(secrets...), Vec(Filler(infoBytes+16)))
}

// GroupInfo is a GroupInfo of group gid at epoch, with a ratchet_tree
// extension (type 2) of tree bytes of filler when tree > 0.
func GroupInfo(gid []byte, epoch uint64, tree int) []byte {
	ext := Vec()
	if tree > 0 {
		ext = Vec(Cat(U16(2), Vec(Filler(tree))))
	}
	return Message(4, U16(1), U16(1), Vec(gid), U64(epoch), Vec(Filler(32)), Vec(Filler(32)),
		Vec(), ext, Vec(Filler(32)), U32(0), Vec(Filler(64)))
}

// PrivateMessage is an application PrivateMessage of group gid at epoch,
// with 64 bytes of ciphertext.
func PrivateMessage(gid []byte, epoch uint64) []byte {
	return Message(2, Vec(gid), U64(epoch), []byte{1}, Vec(), Vec(Filler(16)), Vec(Filler(64)))
}
