// Package mls reads the parts of RFC 9420 (Messaging Layer Security) messages
// that nah, as the delivery service, must see: the framing of an MLSMessage,
// a commit's proposals, a KeyPackage, and the KeyPackage's signatures.
//
// It is its own package because it decodes bytes that come from outside
// (phones), which is worth fuzzing and testing against the MLS working
// group's vectors on its own; it imports only the standard library and must
// never depend on the store or the HTTP layer. Every length is bounded by the
// input left and by the limits below before anything is allocated, and
// trailing bytes are an error. It decrypts nothing and checks no MLS state.
//
// Byte slices in the returned values alias the input: keep the input
// unchanged while they are in use.
package mls

import "errors"

// Wire formats (RFC 9420 §6).
const (
	WirePublicMessage  = 1
	WirePrivateMessage = 2
	WireWelcome        = 3
	WireGroupInfo      = 4
	WireKeyPackage     = 5
)

// Content types (RFC 9420 §6).
const (
	ContentApplication = 1
	ContentProposal    = 2
	ContentCommit      = 3
)

// Proposal types (RFC 9420 §12.1); nah reads Add and Remove, and skips the
// others by their structure.
const (
	ProposalAdd                    = 1
	ProposalUpdate                 = 2
	ProposalRemove                 = 3
	ProposalPSK                    = 4
	ProposalReInit                 = 5
	ProposalExternalInit           = 6
	ProposalGroupContextExtensions = 7
)

// Sender types (RFC 9420 §6).
const (
	SenderMember            = 1
	SenderExternal          = 2
	SenderNewMemberProposal = 3
	SenderNewMemberCommit   = 4
)

// Credential types (RFC 9420 §5.3).
const (
	CredentialBasic = 1
	CredentialX509  = 2
)

// Leaf node sources (RFC 9420 §7.2).
const (
	SourceKeyPackage = 1
	SourceUpdate     = 2
	SourceCommit     = 3
)

// Limits on outside input. Parse allocates about 540 bytes per Add and 60 per
// Welcome entry beyond the input it aliases, so 1,000 of each keep a parse
// under 0.6 MB (TestParseAllocBound, 1,000 of the smallest Adds: 538 KB); a
// family's group of 150 devices fits 6 times over.
const (
	MaxMessage        = 1 << 20 // any MLSMessage
	MaxKeyPackage     = 16 << 10
	MaxProposals      = 1000 // proposals in one commit
	MaxWelcomeMembers = 1000 // EncryptedGroupSecrets in one Welcome
)

// ErrUnsupportedSuite is returned for a cipher suite nah cannot verify or hash.
var ErrUnsupportedSuite = errors.New("mls: unsupported cipher suite")

// Message is what the delivery service reads of an MLSMessage; the rest stays opaque.
type Message struct {
	WireFormat  uint16
	GroupID     []byte    // PublicMessage, PrivateMessage, GroupInfo
	Epoch       uint64    // PublicMessage, PrivateMessage, GroupInfo
	ContentType uint8     // PublicMessage, PrivateMessage
	Sender      Sender    // PublicMessage only
	Commit      *Commit   // PublicMessage with ContentCommit
	Proposal    *Proposal // PublicMessage with ContentProposal
	Welcome     *Welcome
	KeyPackage  *KeyPackage
}

// Sender is a PublicMessage's sender (RFC 9420 §6).
type Sender struct {
	Type      uint8
	LeafIndex uint32 // SenderMember
}

// Commit is a commit's proposals and, when it has an UpdatePath, the
// committer's new LeafNode (RFC 9420 §12.4).
type Commit struct {
	Proposals []Proposal
	Path      *LeafNode
}

// Proposal is one ProposalOrRef of a commit, or a standalone proposal.
type Proposal struct {
	Type       uint16
	ByRef      []byte      // non-nil when the proposal is a reference (ProposalOrRef.reference)
	Add        *KeyPackage // ProposalAdd
	RemoveLeaf uint32      // ProposalRemove
}

// KeyPackage is a client's published KeyPackage (RFC 9420 §10).
type KeyPackage struct {
	Raw         []byte // the KeyPackage's exact bytes (not the MLSMessage wrapper)
	CipherSuite uint16
	InitKey     []byte
	Leaf        LeafNode
	Signature   []byte

	tbs []byte // the bytes before the signature: KeyPackageTBS
}

// LeafNode is a member's leaf (RFC 9420 §7.2). Extensions and an X.509
// credential's certificates are checked for their structure and not kept:
// nah's clients have basic credentials.
type LeafNode struct {
	SignatureKey   []byte
	EncryptionKey  []byte
	CredentialType uint16 // CredentialBasic or CredentialX509
	Identity       []byte // BasicCredential identity
	Capabilities   Capabilities
	Source         uint8  // SourceKeyPackage, SourceUpdate or SourceCommit
	NotBefore      uint64 // SourceKeyPackage: lifetime, seconds since the epoch
	NotAfter       uint64
	ParentHash     []byte // SourceCommit
	Signature      []byte

	tbs []byte // the bytes before the signature: LeafNodeTBS for SourceKeyPackage
}

// Capabilities is what a client says it supports (RFC 9420 §7.2).
type Capabilities struct {
	Versions, CipherSuites, Extensions, Proposals, Credentials []uint16
}

// Welcome is a Welcome's clear part (RFC 9420 §12.4.3.1).
type Welcome struct {
	CipherSuite uint16
	NewMembers  [][]byte // KeyPackageRefs of the EncryptedGroupSecrets
}

// Parse reads an MLSMessage (RFC 9420 §6). Every length is bounded by len(b)
// and by the limits above; trailing bytes are an error.
func Parse(b []byte) (*Message, error) {
	if len(b) > MaxMessage {
		return nil, errors.New("mls: message over 1 MiB")
	}
	r := newReader(b)
	if v := r.u16("version"); r.err == nil && v != 1 {
		r.fail("version %d is not mls10", v)
	}
	m := &Message{WireFormat: r.u16("wire format")}
	if r.err != nil {
		return nil, r.err
	}
	switch m.WireFormat {
	case WirePublicMessage:
		r.publicMessage(m)
	case WirePrivateMessage:
		m.GroupID = r.vec("group id")
		m.Epoch = r.u64("epoch")
		m.ContentType = r.contentType()
		r.vec("authenticated data")
		r.vec("encrypted sender data")
		r.vec("ciphertext")
	case WireWelcome:
		m.Welcome = r.welcome()
	case WireGroupInfo:
		r.groupInfo(m)
	case WireKeyPackage:
		m.KeyPackage = r.keyPackage()
	default:
		r.fail("unknown wire format %d", m.WireFormat)
	}
	if r.err == nil && r.off != len(b) {
		r.fail("%d trailing bytes", len(b)-r.off)
	}
	if r.err != nil {
		return nil, r.err
	}
	return m, nil
}

// ParseKeyPackage reads an MLSMessage whose wire format is mls_key_package.
func ParseKeyPackage(b []byte) (*KeyPackage, error) {
	if len(b) > 4+MaxKeyPackage {
		return nil, errors.New("mls: key package over 16 KiB")
	}
	m, err := Parse(b)
	if err != nil {
		return nil, err
	}
	if m.WireFormat != WireKeyPackage {
		return nil, errors.New("mls: not a key package")
	}
	return m.KeyPackage, nil
}

func (r *reader) contentType() uint8 {
	t := r.u8("content type")
	if r.err == nil && (t < ContentApplication || t > ContentCommit) {
		r.fail("unknown content type %d", t)
	}
	return t
}

// publicMessage reads PublicMessage: FramedContent, FramedContentAuthData and
// the membership tag of a member sender.
func (r *reader) publicMessage(m *Message) {
	m.GroupID = r.vec("group id")
	m.Epoch = r.u64("epoch")
	m.Sender.Type = r.u8("sender type")
	switch m.Sender.Type {
	case SenderMember:
		m.Sender.LeafIndex = r.u32("leaf index")
	case SenderExternal:
		r.u32("sender index")
	case SenderNewMemberProposal, SenderNewMemberCommit:
	default:
		r.fail("unknown sender type %d", m.Sender.Type)
	}
	r.vec("authenticated data")
	m.ContentType = r.contentType()
	switch m.ContentType {
	case ContentApplication:
		r.vec("application data")
	case ContentProposal:
		p := r.proposal()
		m.Proposal = &p
	case ContentCommit:
		m.Commit = r.commit()
	}
	r.vec("signature")
	if m.ContentType == ContentCommit {
		r.vec("confirmation tag")
	}
	if m.Sender.Type == SenderMember {
		r.vec("membership tag")
	}
}

// welcome reads Welcome, keeping the KeyPackageRef of each EncryptedGroupSecrets.
func (r *reader) welcome() *Welcome {
	w := &Welcome{CipherSuite: r.u16("cipher suite")}
	outer := r.open("welcome secrets")
	for r.more() {
		if len(w.NewMembers) == MaxWelcomeMembers {
			r.fail("welcome for more than %d members", MaxWelcomeMembers)
			break
		}
		w.NewMembers = append(w.NewMembers, r.vec("new member"))
		r.vec("kem output")
		r.vec("encrypted group secrets")
	}
	r.close(outer, "welcome secrets")
	r.vec("encrypted group info")
	return w
}

// groupInfo reads GroupInfo, keeping its GroupContext's group id and epoch.
func (r *reader) groupInfo(m *Message) {
	if v := r.u16("group context version"); r.err == nil && v != 1 {
		r.fail("group context version %d is not mls10", v)
	}
	r.u16("cipher suite")
	m.GroupID = r.vec("group id")
	m.Epoch = r.u64("epoch")
	r.vec("tree hash")
	r.vec("confirmed transcript hash")
	r.extensions("group context extensions")
	r.extensions("group info extensions")
	r.vec("confirmation tag")
	r.u32("signer")
	r.vec("signature")
}
