package mls

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"testing"
)

// The vectors in testdata/ are the MLS working group's, from
// github.com/mlswg/mls-implementations at commit
// cfd450286d1bfd9cd2519b95c80f9771f94a5b1a, test-vectors/ (messages.json
// trimmed to cases 0-3, 100-103 and 200-203,
// four of each of suites 1, 3 and 2; passive-client-handling-commit.json
// trimmed to its 13 cases of suite 1; the others whole).

func load(t testing.TB, name string, v any) {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type messagesVector struct {
	Welcome          string `json:"mls_welcome"`
	GroupInfo        string `json:"mls_group_info"`
	KeyPackage       string `json:"mls_key_package"`
	Add              string `json:"add_proposal"`
	Update           string `json:"update_proposal"`
	Remove           string `json:"remove_proposal"`
	PSK              string `json:"pre_shared_key_proposal"`
	ReInit           string `json:"re_init_proposal"`
	ExternalInit     string `json:"external_init_proposal"`
	GroupContextExts string `json:"group_context_extensions_proposal"`
	Commit           string `json:"commit"`
	Application      string `json:"public_message_application"`
	PublicProposal   string `json:"public_message_proposal"`
	PublicCommit     string `json:"public_message_commit"`
	Private          string `json:"private_message"`
}

// whole runs a decoder of one structure over b and requires it to read b
// exactly, as Parse does for an MLSMessage.
func whole(t *testing.T, name string, b []byte, read func(r *reader)) {
	t.Helper()
	r := newReader(b)
	read(r)
	if r.err == nil && r.off != len(b) {
		r.fail("%d trailing bytes", len(b)-r.off)
	}
	if r.err != nil {
		t.Errorf("%s: %v", name, r.err)
	}
}

// TestMessagesVectors: every serialized message and structure of
// messages.json decodes whole, and the fields nah reads are where the
// encoding puts them.
func TestMessagesVectors(t *testing.T) {
	var vs []messagesVector
	load(t, "messages.json", &vs)
	if len(vs) != 12 {
		t.Fatalf("%d vectors, want 12", len(vs))
	}
	for i, v := range vs {
		kpMsg := unhex(t, v.KeyPackage)
		kp, err := ParseKeyPackage(kpMsg)
		if err != nil {
			t.Fatalf("%d: key package: %v", i, err)
		}
		keyLen := map[uint16]int{1: 32, 2: 65, 3: 32}[kp.CipherSuite] // Ed25519; P-256 uncompressed
		if !bytes.Equal(kp.Raw, kpMsg[4:]) || kp.Leaf.CredentialType != CredentialBasic || len(kp.Leaf.SignatureKey) != keyLen {
			t.Errorf("%d: key package fields: raw %d of %d bytes, credential %d, signature key %x", i, len(kp.Raw), len(kpMsg)-4, kp.Leaf.CredentialType, kp.Leaf.SignatureKey)
		}
		if err := kp.Verify(); err != nil {
			t.Errorf("%d: key package: %v", i, err)
		}

		m, err := Parse(unhex(t, v.Welcome))
		if err != nil || m.WireFormat != WireWelcome || m.Welcome.CipherSuite != kp.CipherSuite || len(m.Welcome.NewMembers) == 0 {
			t.Errorf("%d: welcome: %v %+v", i, err, m)
		}
		gi := unhex(t, v.GroupInfo)
		m, err = Parse(gi)
		if err != nil || m.WireFormat != WireGroupInfo || !bytes.Equal(m.GroupID, gi[9:9+gi[8]]) || m.Epoch != binary.BigEndian.Uint64(gi[9+gi[8]:]) {
			t.Errorf("%d: group info: %v %+v", i, err, m)
		}
		pm := unhex(t, v.Private)
		m, err = Parse(pm)
		if err != nil || m.WireFormat != WirePrivateMessage || !bytes.Equal(m.GroupID, pm[5:5+pm[4]]) || m.ContentType < 1 || m.ContentType > 3 {
			t.Errorf("%d: private message: %v %+v", i, err, m)
		}
		for ct, s := range map[uint8]string{ContentApplication: v.Application, ContentProposal: v.PublicProposal, ContentCommit: v.PublicCommit} {
			b := unhex(t, s)
			m, err := Parse(b)
			if err != nil || m.WireFormat != WirePublicMessage || m.ContentType != ct || !bytes.Equal(m.GroupID, b[5:5+b[4]]) ||
				(ct == ContentCommit) != (m.Commit != nil) || (ct == ContentProposal) != (m.Proposal != nil) {
				t.Errorf("%d: public message of content %d: %v %+v", i, ct, err, m)
				continue
			}
			if m.Sender.Type == SenderMember && m.Sender.LeafIndex != binary.BigEndian.Uint32(b[5+b[4]+8+1:]) {
				t.Errorf("%d: sender leaf %d", i, m.Sender.LeafIndex)
			}
		}

		whole(t, "add", unhex(t, v.Add), func(r *reader) {
			if kp := r.keyPackage(); r.err == nil && kp.Verify() != nil {
				t.Errorf("%d: add's key package: %v", i, kp.Verify())
			}
		})
		whole(t, "update", unhex(t, v.Update), func(r *reader) {
			if n := r.leafNode(); r.err == nil && n.Source != SourceUpdate {
				t.Errorf("%d: update's leaf source %d", i, n.Source)
			}
		})
		rm := unhex(t, v.Remove)
		whole(t, "remove", append([]byte{0, ProposalRemove}, rm...), func(r *reader) {
			if p := r.proposal(); p.RemoveLeaf != binary.BigEndian.Uint32(rm) {
				t.Errorf("%d: removed leaf %d, want %x", i, p.RemoveLeaf, rm)
			}
		})
		whole(t, "psk", unhex(t, v.PSK), func(r *reader) { r.preSharedKeyID() })
		for typ, s := range map[uint16]string{ProposalReInit: v.ReInit, ProposalExternalInit: v.ExternalInit, ProposalGroupContextExtensions: v.GroupContextExts} {
			whole(t, "proposal", append(binary.BigEndian.AppendUint16(nil, typ), unhex(t, s)...), func(r *reader) { r.proposal() })
		}
		whole(t, "commit", unhex(t, v.Commit), func(r *reader) { r.commit() })
	}
}

// TestDeserialization: the variable-length vector headers of
// deserialization.json read as their lengths (up to 2^30-1: the bound by the
// input is TestRefuse's).
func TestDeserialization(t *testing.T) {
	var vs []struct {
		Header string `json:"vlbytes_header"`
		Length int    `json:"length"`
	}
	load(t, "deserialization.json", &vs)
	for _, v := range vs {
		r := newReader(unhex(t, v.Header))
		if n := r.varint("test"); r.err != nil || n != v.Length || r.off != len(r.b) {
			t.Errorf("%s: got %d, %v; want %d", v.Header, n, r.err, v.Length)
		}
	}
}

// TestCryptoBasics: RefHash and VerifyWithLabel of crypto-basics.json for
// every suite this package knows (verification where the standard library
// has the scheme), and a signature checked under another label fails.
func TestCryptoBasics(t *testing.T) {
	var vs []struct {
		Suite   uint16 `json:"cipher_suite"`
		RefHash struct {
			Label, Value, Out string
		} `json:"ref_hash"`
		Sign struct {
			Pub, Content, Label, Signature string
		} `json:"sign_with_label"`
	}
	load(t, "crypto-basics.json", &vs)
	verified := 0
	for _, v := range vs {
		s, ok := suites[v.Suite]
		if !ok {
			t.Fatalf("suite %d unknown", v.Suite)
		}
		if got := refHash(s, v.RefHash.Label, unhex(t, v.RefHash.Value)); !bytes.Equal(got, unhex(t, v.RefHash.Out)) {
			t.Errorf("suite %d: ref hash %x, want %s", v.Suite, got, v.RefHash.Out)
		}
		if !s.ed && s.curve == nil {
			continue
		}
		pub, content, sig := unhex(t, v.Sign.Pub), unhex(t, v.Sign.Content), unhex(t, v.Sign.Signature)
		if !verifyWithLabel(s, pub, v.Sign.Label, content, sig) {
			t.Errorf("suite %d: signature does not verify", v.Suite)
		}
		if verifyWithLabel(s, pub, v.Sign.Label+"x", content, sig) {
			t.Errorf("suite %d: signature verifies under another label", v.Suite)
		}
		verified++
	}
	if verified != 5 {
		t.Errorf("verified %d suites, want 5 (1, 2, 3, 5, 7)", verified)
	}
}

// TestWelcomeVectors: welcome.json's KeyPackages verify (or say their suite
// is unsupported: Ed448), and their Ref is the new member its Welcome names.
func TestWelcomeVectors(t *testing.T) {
	var vs []struct {
		Suite      uint16 `json:"cipher_suite"`
		KeyPackage string `json:"key_package"`
		Welcome    string `json:"welcome"`
	}
	load(t, "welcome.json", &vs)
	for _, v := range vs {
		kp, err := ParseKeyPackage(unhex(t, v.KeyPackage))
		if err != nil || kp.CipherSuite != v.Suite {
			t.Fatalf("suite %d: %v", v.Suite, err)
		}
		err = kp.Verify()
		if v.Suite == 4 || v.Suite == 6 {
			if !errors.Is(err, ErrUnsupportedSuite) {
				t.Errorf("suite %d: Verify: %v, want ErrUnsupportedSuite", v.Suite, err)
			}
		} else if err != nil {
			t.Errorf("suite %d: %v", v.Suite, err)
		}
		ref, err := kp.Ref()
		if err != nil {
			t.Fatal(err)
		}
		m, err := Parse(unhex(t, v.Welcome))
		if err != nil || m.Welcome.CipherSuite != v.Suite || len(m.Welcome.NewMembers) != 1 || !bytes.Equal(m.Welcome.NewMembers[0], ref) {
			t.Errorf("suite %d: welcome %v, want new member %x", v.Suite, err, ref)
		}
	}
}

// TestPassiveClientVectors: the commits and proposals of
// passive-client-handling-commit.json (suite 1: Add, Remove, PSK and
// GroupContextExtensions by value and by reference, with and without a
// path) parse; their group and epochs follow on; Adds carry KeyPackages that
// verify; each reference is the ProposalRef of a proposal sent before it
// (RFC 9420 §5.2); and the Welcome names the scenario's KeyPackage.
func TestPassiveClientVectors(t *testing.T) {
	var vs []struct {
		KeyPackage string `json:"key_package"`
		Welcome    string
		Epochs     []struct {
			Proposals []string
			Commit    string
		}
	}
	load(t, "passive-client-handling-commit.json", &vs)
	counts := map[string]int{}
	for i, v := range vs {
		kp, err := ParseKeyPackage(unhex(t, v.KeyPackage))
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		ref, _ := kp.Ref()
		if w, err := Parse(unhex(t, v.Welcome)); err != nil || len(w.Welcome.NewMembers) != 1 || !bytes.Equal(w.Welcome.NewMembers[0], ref) {
			t.Errorf("%d: welcome %v, want new member %x", i, err, ref)
		}
		var group []byte
		var epoch uint64
		for e, ep := range v.Epochs {
			refs := map[string]bool{}
			for _, h := range ep.Proposals {
				b := unhex(t, h)
				m, err := Parse(b)
				if err != nil || m.Proposal == nil || m.Sender.Type != SenderMember {
					t.Fatalf("%d/%d: proposal %v %+v", i, e, err, m)
				}
				// AuthenticatedContent: the message without its version and its membership tag (1+32 bytes).
				refs[string(refHash(suites[1], "MLS 1.0 Proposal Reference", b[2:len(b)-33]))] = true
			}
			m, err := Parse(unhex(t, ep.Commit))
			if err != nil || m.Commit == nil {
				t.Fatalf("%d/%d: commit %v", i, e, err)
			}
			if e == 0 {
				group, epoch = m.GroupID, m.Epoch
			} else if !bytes.Equal(m.GroupID, group) || m.Epoch != epoch+uint64(e) {
				t.Errorf("%d/%d: commit of group %x epoch %d, want %x epoch %d", i, e, m.GroupID, m.Epoch, group, epoch+uint64(e))
			}
			if m.Commit.Path != nil {
				counts["path"]++
			}
			for _, p := range m.Commit.Proposals {
				switch {
				case p.ByRef != nil:
					counts["ref"]++
					if !refs[string(p.ByRef)] {
						t.Errorf("%d/%d: reference %x to no proposal sent", i, e, p.ByRef)
					}
				case p.Type == ProposalAdd:
					counts["add"]++
					if err := p.Add.Verify(); err != nil || len(p.Add.Leaf.Identity) == 0 {
						t.Errorf("%d/%d: add: %v", i, e, err)
					}
				case p.Type == ProposalRemove:
					counts["remove"]++
				default:
					counts["other"]++
				}
			}
		}
	}
	if want := map[string]int{"path": 20, "ref": 12, "add": 2, "remove": 2, "other": 6}; fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("covered %v, want %v", counts, want)
	}
}
