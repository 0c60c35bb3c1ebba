package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
)

// A minimal TLS-presentation encoder (RFC 9420 §2.1) of the MLS messages
// bench mls sends, written apart from package mls (which only decodes) so
// that a fault in one is not copied into the other; mls_test.go checks it
// against mls.Parse and Verify. Suite 1 only (X25519, AES-128-GCM, SHA-256,
// Ed25519). KeyPackage signatures are real: nah verifies them. Everything
// nah cannot check (a commit's signature, confirmation and membership tags,
// HPKE ciphertexts, path secrets) is random filler of the size a real client
// sends for suite 1.

func wcat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
func wu16(v uint16) []byte        { return binary.BigEndian.AppendUint16(nil, v) }
func wu32(v uint32) []byte        { return binary.BigEndian.AppendUint32(nil, v) }
func wu64(v uint64) []byte        { return binary.BigEndian.AppendUint64(nil, v) }

// wvec is opaque<V>: the parts joined, after their length in the shortest
// variable-length form (RFC 9420 §2.1.2).
func wvec(parts ...[]byte) []byte {
	b := wcat(parts...)
	switch l := len(b); {
	case l < 1<<6:
		return append([]byte{byte(l)}, b...)
	case l < 1<<14:
		return append(wu16(uint16(l)|0x4000), b...)
	default:
		return append(wu32(uint32(l)|0x80000000), b...)
	}
}

// filler is n random bytes, for what nah cannot check.
func filler(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// signWithLabel is SignWithLabel (RFC 9420 §5.1.2) with Ed25519.
func signWithLabel(priv ed25519.PrivateKey, label string, content []byte) []byte {
	return ed25519.Sign(priv, wcat(wvec([]byte("MLS 1.0 "+label)), wvec(content)))
}

// mlsMessage is an MLSMessage (version mls10) of wire format wire.
func mlsMessage(wire uint16, body ...[]byte) []byte { return wcat(wu16(1), wu16(wire), wcat(body...)) }

// capabilities says mls10, suite 1, basic credentials.
func capabilities() []byte {
	return wcat(wvec(wu16(1)), wvec(wu16(1)), wvec(), wvec(), wvec(wu16(1)))
}

// mlsKeyPackage is an MLSMessage holding a KeyPackage of suite 1 whose
// BasicCredential's identity is the client id, signed (LeafNodeTBS and
// KeyPackageTBS) by priv.
func mlsKeyPackage(priv ed25519.PrivateKey, client string) []byte {
	pub := priv.Public().(ed25519.PublicKey)
	leafTBS := wcat(wvec(filler(32)), wvec(pub), wu16(1), wvec([]byte(client)), capabilities(),
		[]byte{1}, wu64(0), wu64(1<<40), wvec()) // source key_package, lifetime, no extensions
	tbs := wcat(wu16(1), wu16(1), wvec(filler(32)), leafTBS, wvec(signWithLabel(priv, "LeafNodeTBS", leafTBS)), wvec())
	return mlsMessage(5, tbs, wvec(signWithLabel(priv, "KeyPackageTBS", tbs)))
}

// kpRef is the KeyPackageRef (RFC 9420 §5.2) of the KeyPackage in the
// MLSMessage m.
func kpRef(m []byte) []byte {
	h := sha256.Sum256(wcat(wvec([]byte("MLS 1.0 KeyPackage Reference")), wvec(m[4:])))
	return h[:]
}

// updatePath is the committer's new leaf (source commit) and one
// UpdatePathNode a level of a tree of members leaves, each encrypted to
// one copath node: what a commit with a path carries.
func updatePath(priv ed25519.PrivateKey, client string, members int) []byte {
	pub := priv.Public().(ed25519.PublicKey)
	leaf := wcat(wvec(filler(32)), wvec(pub), wu16(1), wvec([]byte(client)), capabilities(),
		[]byte{3}, wvec(filler(32)), wvec()) // source commit, parent hash, no extensions
	leaf = wcat(leaf, wvec(filler(64))) // its signature: nah does not check it
	var nodes [][]byte
	for n := 1; n < members; n *= 2 {
		// HPKE: a 32-byte KEM output, the 32-byte path secret sealed with a 16-byte tag.
		nodes = append(nodes, wcat(wvec(filler(32)), wvec(wcat(wvec(filler(32)), wvec(filler(48))))))
	}
	return wcat([]byte{1}, leaf, wvec(nodes...))
}

// mlsCommit is a PublicMessage commit to group gid at epoch, sent by the
// member at leaf, whose proposals are inline Adds of the KeyPackages kps
// (MLSMessages) and whose path is path (nil for none). The signature,
// confirmation tag and membership tag are filler of their sizes for
// suite 1 (64, 32, 32 bytes): nah keeps no group secrets and cannot check
// them, the members do.
func mlsCommit(gid []byte, epoch uint64, leaf uint32, path []byte, kps ...[]byte) []byte {
	var props [][]byte
	for _, kp := range kps {
		props = append(props, wcat([]byte{1}, wu16(1), kp[4:])) // proposal, Add
	}
	if path == nil {
		path = []byte{0}
	}
	return mlsMessage(1, wvec(gid), wu64(epoch), []byte{1}, wu32(leaf), wvec(), []byte{3},
		wvec(props...), path, wvec(filler(64)), wvec(filler(32)), wvec(filler(32)))
}

// mlsWelcome is a Welcome (suite 1) for the KeyPackages kps, with an
// encrypted GroupInfo of infoBytes: each EncryptedGroupSecrets has a
// 32-byte KEM output and the GroupSecrets (joiner secret, no path secret,
// no PSKs) sealed with a 16-byte tag.
func mlsWelcome(infoBytes int, kps ...[]byte) []byte {
	var secrets [][]byte
	for _, kp := range kps {
		secrets = append(secrets, wcat(wvec(kpRef(kp)), wvec(filler(32)), wvec(filler(36+16))))
	}
	return mlsMessage(3, wu16(1), wvec(secrets...), wvec(filler(infoBytes+16)))
}

// mlsGroupInfo is a GroupInfo of group gid at epoch whose ratchet_tree
// extension (type 2) is tree bytes of filler.
func mlsGroupInfo(gid []byte, epoch uint64, tree int) []byte {
	ext := wvec(wcat(wu16(2), wvec(filler(tree))))
	return mlsMessage(4, wu16(1), wu16(1), wvec(gid), wu64(epoch), wvec(filler(32)), wvec(filler(32)),
		wvec(), ext, wvec(filler(32)), wu32(0), wvec(filler(64)))
}
