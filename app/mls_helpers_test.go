package app

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"testing"
)

// A test-only encoder of the few RFC 9420 messages the delivery service
// reads, written apart from mls/ so that a fault in one is not copied into
// the other. Signatures are real where nah checks them (KeyPackages);
// the rest (commit signatures, tags, ciphertexts) nah leaves to the phones.

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
func u16(v uint16) []byte        { return binary.BigEndian.AppendUint16(nil, v) }
func u32(v uint32) []byte        { return binary.BigEndian.AppendUint32(nil, v) }
func u64(v uint64) []byte        { return binary.BigEndian.AppendUint64(nil, v) }

// vec is opaque<V>: the parts joined, after their length in the shortest
// variable-length form (RFC 9420 §2.1.2).
func vec(parts ...[]byte) []byte {
	b := cat(parts...)
	switch l := len(b); {
	case l < 1<<6:
		return append([]byte{byte(l)}, b...)
	case l < 1<<14:
		return append(u16(uint16(l)|0x4000), b...)
	default:
		return append(u32(uint32(l)|0x80000000), b...)
	}
}

func mlsSign(priv ed25519.PrivateKey, label string, content []byte) []byte {
	return ed25519.Sign(priv, cat(vec([]byte("MLS 1.0 "+label)), vec(content)))
}

// mlsMessage is an MLSMessage of wire format wire.
func mlsMessage(wire uint16, body ...[]byte) []byte { return cat(u16(1), u16(wire), cat(body...)) }

// mlsClient is a phone's MLS client in a test: its signature key and the
// id nah gave it.
type mlsClient struct {
	id   string
	priv ed25519.PrivateKey
}

func newMLSKey() ed25519.PrivateKey {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	return priv
}

func (c mlsClient) pub() []byte { return c.priv.Public().(ed25519.PublicKey) }

// keyPackage is the raw KeyPackage (suite 1) of identity, signed by priv.
func keyPackage(priv ed25519.PrivateKey, identity string) []byte {
	pub := priv.Public().(ed25519.PublicKey)
	hpke, init := make([]byte, 32), make([]byte, 32)
	rand.Read(hpke)
	rand.Read(init)
	leafTBS := cat(vec(hpke), vec(pub), u16(1), vec([]byte(identity)),
		vec(u16(1)), vec(u16(1)), vec(), vec(), vec(u16(1)), // capabilities
		[]byte{1}, u64(0), u64(1<<40), vec()) // source key_package, lifetime, extensions
	tbs := cat(u16(1), u16(1), vec(init), leafTBS, vec(mlsSign(priv, "LeafNodeTBS", leafTBS)), vec())
	return cat(tbs, vec(mlsSign(priv, "KeyPackageTBS", tbs)))
}

// kpMessage is c's KeyPackage in its MLSMessage, as uploaded.
func (c mlsClient) kpMessage() []byte { return mlsMessage(5, keyPackage(c.priv, c.id)) }

// kpRef is a KeyPackage's reference (RFC 9420 §5.2), of the raw bytes
// inside the MLSMessage m.
func kpRef(m []byte) []byte {
	h := sha256.Sum256(cat(vec([]byte("MLS 1.0 KeyPackage Reference")), vec(m[4:])))
	return h[:]
}

func addProposal(kpMsg []byte) []byte { return cat([]byte{1}, u16(1), kpMsg[4:]) }
func removeProposal(leaf uint32) []byte {
	return cat([]byte{1}, u16(3), u32(leaf))
}

// commitMsg is a PublicMessage commit to group gid at epoch from leaf,
// without a path.
func commitMsg(gid string, epoch uint64, leaf uint32, proposals ...[]byte) []byte {
	return mlsMessage(1, vec([]byte(gid)), u64(epoch), []byte{1}, u32(leaf), vec(), []byte{3},
		vec(proposals...), []byte{0}, vec(make([]byte, 64)), vec(make([]byte, 32)), vec(make([]byte, 32)))
}

// welcomeMsg is a Welcome for the KeyPackages refs name.
func welcomeMsg(refs ...[]byte) []byte {
	var secrets [][]byte
	for _, r := range refs {
		secrets = append(secrets, cat(vec(r), vec(make([]byte, 32)), vec(make([]byte, 48))))
	}
	return mlsMessage(3, u16(1), vec(secrets...), vec(make([]byte, 100)))
}

// groupInfoMsg is a GroupInfo of group gid at epoch.
func groupInfoMsg(gid string, epoch uint64) []byte {
	return mlsMessage(4, u16(1), u16(1), vec([]byte(gid)), u64(epoch), vec(make([]byte, 32)), vec(make([]byte, 32)),
		vec(), vec(), vec(make([]byte, 32)), u32(0), vec(make([]byte, 64)))
}

// privateMsg is a PrivateMessage application message of group gid at epoch.
func privateMsg(gid string, epoch uint64) []byte {
	ct := make([]byte, 64)
	rand.Read(ct)
	return mlsMessage(2, vec([]byte(gid)), u64(epoch), []byte{1}, vec(), vec(make([]byte, 16)), vec(ct))
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// addClient registers a new MLS client of a through the API.
func (ts *testServer) addClient(t *testing.T, a account) mlsClient {
	t.Helper()
	c := mlsClient{priv: newMLSKey()}
	r := ts.do(t, "POST", "/api/v1/me/clients", a.token, map[string]string{"signature_key": b64(c.pub()), "name": a.handle + "'s phone"})
	if r.status != 201 {
		t.Fatalf("add client: %d %s", r.status, r.raw)
	}
	c.id = r.str("id")
	return c
}

// uploadKPs uploads n KeyPackages of c and a last-resort one.
func (ts *testServer) uploadKPs(t *testing.T, a account, c mlsClient, n int) {
	t.Helper()
	var kps []string
	for range n {
		kps = append(kps, b64(c.kpMessage()))
	}
	r := ts.do(t, "POST", "/api/v1/me/clients/"+c.id+"/key_packages", a.token, map[string]any{"key_packages": kps, "last_resort": b64(c.kpMessage())})
	if r.status != 200 {
		t.Fatalf("upload key packages: %d %s", r.status, r.raw)
	}
}
