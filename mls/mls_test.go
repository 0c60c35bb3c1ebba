package mls

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"testing"
)

// The tests build messages with their own encoder (cat, vec, u16...), kept
// apart from the package's, so that a fault in one is not copied into the other.

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func u16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// vec is opaque data<V> of the parts joined, its length in the shortest form.
func vec(parts ...[]byte) []byte {
	b := cat(parts...)
	var n []byte
	switch l := len(b); {
	case l < 64:
		n = []byte{byte(l)}
	case l < 1<<14:
		n = []byte{0x40 | byte(l>>8), byte(l)}
	default:
		n = u32(uint32(l) | 0x80000000)
	}
	return append(n, b...)
}

func sign(priv ed25519.PrivateKey, label string, content []byte) []byte {
	return ed25519.Sign(priv, cat(vec([]byte("MLS 1.0 "+label)), vec(content)))
}

// keyPackage builds a suite 1 KeyPackage for identity, signed by priv.
func keyPackage(priv ed25519.PrivateKey, identity string) []byte {
	return keyPackageOf(priv, identity, bytes.Repeat([]byte{2}, 32), SourceKeyPackage)
}

// keyPackageOf builds a suite 1 KeyPackage with the given init key and leaf
// source; its leaf's encryption key is 32 bytes of 1.
func keyPackageOf(priv ed25519.PrivateKey, identity string, initKey []byte, source uint8) []byte {
	pub := priv.Public().(ed25519.PublicKey)
	lifetime := cat(u64(0), u64(1<<40))
	if source != SourceKeyPackage {
		lifetime = nil
	}
	leafTBS := cat(vec(bytes.Repeat([]byte{1}, 32)), vec(pub), u16(CredentialBasic), vec([]byte(identity)),
		vec(u16(1)), vec(u16(1)), vec(), vec(), vec(u16(1)), // capabilities
		[]byte{source}, lifetime, vec())
	tbs := cat(u16(1), u16(1), vec(initKey), leafTBS, vec(sign(priv, "LeafNodeTBS", leafTBS)), vec())
	return cat(tbs, vec(sign(priv, "KeyPackageTBS", tbs)))
}

func message(wire uint16, body ...[]byte) []byte { return cat(u16(1), u16(wire), cat(body...)) }

// epoch is one whose halves differ, so that reading it as 32 bits shows.
const epoch = 0x0102030405060708

// commit is a PublicMessage commit for group "nah:p1" at epoch from leaf 3,
// without a path.
func commit(proposals ...[]byte) []byte {
	return message(WirePublicMessage, vec([]byte("nah:p1")), u64(epoch), []byte{SenderMember}, u32(3), vec(), []byte{ContentCommit},
		vec(proposals...), []byte{0}, vec(make([]byte, 64)), vec(make([]byte, 32)), vec(make([]byte, 32)))
}

func add(kp []byte) []byte      { return cat([]byte{1}, u16(ProposalAdd), kp) }
func remove(leaf uint32) []byte { return cat([]byte{1}, u16(ProposalRemove), u32(leaf)) }
func byRef(ref []byte) []byte   { return cat([]byte{2}, vec(ref)) }

var testKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))

// TestParseCommit: a commit's group, epoch, sender, and its Add, Remove and
// reference proposals read back as written.
func TestParseCommit(t *testing.T) {
	kp := keyPackage(testKey, "c_0a1b")
	m, err := Parse(commit(add(kp), remove(0x01020304), byRef(bytes.Repeat([]byte{9}, 32))))
	if err != nil {
		t.Fatal(err)
	}
	if m.WireFormat != WirePublicMessage || string(m.GroupID) != "nah:p1" || m.Epoch != epoch || m.ContentType != ContentCommit ||
		m.Sender != (Sender{Type: SenderMember, LeafIndex: 3}) || m.Commit == nil || m.Commit.Path != nil || len(m.Commit.Proposals) != 3 {
		t.Fatalf("got %+v", m)
	}
	p := m.Commit.Proposals
	if p[0].Type != ProposalAdd || p[0].ByRef != nil || !bytes.Equal(p[0].Add.Raw, kp) || string(p[0].Add.Leaf.Identity) != "c_0a1b" {
		t.Errorf("add: %+v", p[0])
	}
	if p[1].Type != ProposalRemove || p[1].RemoveLeaf != 0x01020304 || p[1].Add != nil {
		t.Errorf("remove: %+v", p[1])
	}
	if !bytes.Equal(p[2].ByRef, bytes.Repeat([]byte{9}, 32)) {
		t.Errorf("reference: %+v", p[2])
	}
}

// TestParseHeaders: a PrivateMessage's clear header and a GroupInfo's group
// and epoch read back as written (the vectors' are all at epoch 0).
func TestParseHeaders(t *testing.T) {
	for _, b := range [][]byte{
		message(WirePrivateMessage, vec([]byte("nah:p1")), u64(epoch), []byte{ContentApplication}, vec(), vec([]byte("sender")), vec([]byte("ciphertext"))),
		message(WireGroupInfo, u16(1), u16(1), vec([]byte("nah:p1")), u64(epoch), vec(make([]byte, 32)), vec(make([]byte, 32)), vec(), vec(), vec(make([]byte, 32)), u32(0), vec(make([]byte, 64))),
	} {
		m, err := Parse(b)
		if err != nil || string(m.GroupID) != "nah:p1" || m.Epoch != epoch || (m.WireFormat == WirePrivateMessage) != (m.ContentType == ContentApplication) {
			t.Errorf("%v %+v", err, m)
		}
	}
}

// TestKeyPackageAccessors: a KeyPackage's identity and signature key read
// back as signed, Verify accepts it, and refuses it when a byte under either
// signature changes, when its leaf is not a key package's or its init key is
// its encryption key (RFC 9420 §10.1), or when its suite has no verifier here.
func TestKeyPackageAccessors(t *testing.T) {
	raw := keyPackage(testKey, "c_0a1b")
	kp, err := ParseKeyPackage(message(WireKeyPackage, raw))
	if err != nil {
		t.Fatal(err)
	}
	if string(kp.Leaf.Identity) != "c_0a1b" || !bytes.Equal(kp.Leaf.SignatureKey, testKey.Public().(ed25519.PublicKey)) ||
		kp.CipherSuite != 1 || kp.Leaf.CredentialType != CredentialBasic || kp.Leaf.NotAfter != 1<<40 || !bytes.Equal(kp.Raw, raw) {
		t.Fatalf("got %+v", kp)
	}
	if err := kp.Verify(); err != nil {
		t.Fatal(err)
	}
	ref, err := kp.Ref()
	if want := "MLS 1.0 KeyPackage Reference"; err != nil || !bytes.Equal(ref, refHash(suites[1], want, raw)) {
		t.Errorf("ref %x, %v", ref, err)
	}

	tamper := func(at int, want string) {
		t.Helper()
		b := bytes.Clone(raw)
		b[at] ^= 1
		kp, err := ParseKeyPackage(message(WireKeyPackage, b))
		if err == nil {
			err = kp.Verify()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("byte %d changed: %v, want %q", at, err, want)
		}
	}
	tamper(bytes.Index(raw, []byte("c_0a1b")), "leaf node signature does not verify")
	tamper(6, "key package signature does not verify") // the init key
	tamper(3, "unsupported cipher suite")              // suite 1 → 0
	for name, raw := range map[string][]byte{
		"leaf node is not from a key package":   keyPackageOf(testKey, "c_0a1b", bytes.Repeat([]byte{2}, 32), SourceUpdate),
		"init key is the leaf's encryption key": keyPackageOf(testKey, "c_0a1b", bytes.Repeat([]byte{1}, 32), SourceKeyPackage),
	} {
		kp, err := ParseKeyPackage(message(WireKeyPackage, raw))
		if err == nil {
			err = kp.Verify()
		}
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%v, want %q", err, name)
		}
	}
	b := bytes.Clone(raw)
	b[3] = 4 // Ed448: parsed, not verified
	if kp, err := ParseKeyPackage(message(WireKeyPackage, b)); err != nil || !errors.Is(kp.Verify(), ErrUnsupportedSuite) {
		t.Errorf("suite 4: %v", err)
	}
}

// TestRefuse: bad input of each kind gets an error saying what is wrong, and
// the same message without the fault parses.
func TestRefuse(t *testing.T) {
	private := func(group []byte) []byte {
		return message(WirePrivateMessage, group, u64(1), []byte{ContentApplication}, vec(), vec([]byte("sender")), vec([]byte("ciphertext")))
	}
	removes := func(n int) [][]byte {
		p := make([][]byte, n)
		for i := range p {
			p[i] = remove(uint32(i))
		}
		return p
	}
	members := func(n int) []byte {
		return message(WireWelcome, u16(1), vec(bytes.Repeat(cat(vec([]byte("ref")), vec(), vec()), n)), vec())
	}
	adds := func(n int, kp []byte) [][]byte {
		p := make([][]byte, n)
		for i := range p {
			p[i] = add(kp)
		}
		return p
	}
	bigKP := func(n int) []byte {
		kp := keyPackage(testKey, "c_1")
		// the KeyPackage's extensions (empty, before the signature) become one of n bytes
		sig := len(kp) - 66 // a 64-byte signature and its 2-byte length
		return cat(kp[:sig-1], vec(u16(0xff00), vec(make([]byte, n))), kp[sig:])
	}
	for _, c := range []struct {
		name string
		ok   []byte // parses
		bad  []byte // refused
		want string
	}{
		{"non-minimal length", private([]byte{5, 'n', 'a', 'h', ':', 'p'}), private([]byte{0x40, 5, 'n', 'a', 'h', ':', 'p'}), "not minimally encoded"},
		{"length prefix 0b11", private(vec()), private([]byte{0xc0, 0, 0, 0, 0, 0, 0, 0}), "invalid length prefix"},
		{"length beyond the input", private(vec()), private([]byte{50, 1}), "beyond"},
		{"trailing bytes", private(vec()), append(private(vec()), 0), "1 trailing bytes"},
		{"truncated", private(vec()), private(vec())[:len(private(vec()))-1], "beyond"},
		{"version", private(vec()), cat(u16(2), private(vec())[2:]), "version 2 is not mls10"},
		{"wire format", private(vec()), cat(u16(1), u16(9), private(vec())[4:]), "unknown wire format 9"},
		{"proposals", commit(removes(MaxProposals)...), commit(removes(MaxProposals + 1)...), "more than 1000 proposals"},
		{"proposal type", commit(remove(1)), commit(cat([]byte{1}, u16(99), u32(1))), "unknown proposal type 99"},
		{"optional path", commit(remove(1)), bytes.Replace(commit(remove(1)), cat(remove(1), []byte{0}), cat(remove(1), []byte{2}), 1), "neither 0 nor 1"},
		{"proposal cut by its vector", commit(remove(1)), commit(remove(1)[:5]), "truncated"},
		{"message size", commit(adds(60, bigKP(MaxKeyPackage-400))...), commit(adds(70, bigKP(MaxKeyPackage-400))...), "over 1 MiB"},
		{"key package size", message(WireKeyPackage, bigKP(MaxKeyPackage-400)), message(WireKeyPackage, bigKP(MaxKeyPackage)), "over 16 KiB"},
		{"key package size in an add", commit(add(bigKP(MaxKeyPackage - 400))), commit(add(bigKP(MaxKeyPackage))), "over 16 KiB"},
		{"welcome members", members(MaxWelcomeMembers), members(MaxWelcomeMembers + 1), "more than 1000 members"},
	} {
		if _, err := Parse(c.ok); err != nil {
			t.Errorf("%s: the good message: %v", c.name, err)
		}
		if _, err := Parse(c.bad); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// TestParseAllocBound: the inputs that make Parse allocate most for their
// size (the most proposals or Welcome entries, each as small as it can be)
// cost it less than 1 MiB beyond the input.
func TestParseAllocBound(t *testing.T) {
	smallest := func(credential []byte) []byte {
		leaf := cat(vec(), vec(), credential, vec(), vec(), vec(), vec(), vec(), []byte{SourceKeyPackage}, u64(0), u64(0), vec(), vec())
		return cat(u16(1), u16(1), vec(), leaf, vec(), vec())
	}
	kp := smallest(cat(u16(CredentialBasic), vec()))
	x509 := smallest(cat(u16(CredentialX509), vec(bytes.Repeat(vec(), 16))))
	adds := make([][]byte, MaxProposals)
	x509Adds := make([][]byte, MaxProposals)
	for i := range adds {
		adds[i] = add(kp)
		x509Adds[i] = add(x509)
	}
	for name, b := range map[string][]byte{
		"adds":    commit(adds...),
		"x509":    commit(x509Adds...),
		"welcome": message(WireWelcome, u16(1), vec(bytes.Repeat([]byte{0, 0, 0}, MaxWelcomeMembers)), vec()),
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Parse(b)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(name, err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
			t.Errorf("%s: %d bytes allocated for %d bytes of input", name, n, len(b))
		} else {
			t.Logf("%s: %d bytes allocated for %d bytes of input", name, n, len(b))
		}
	}
}
