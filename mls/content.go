package mls

// proposal reads a Proposal (RFC 9420 §12.1). Add and Remove are kept; the
// others are read by their structure and dropped. A type this package does
// not know has no length to skip by, so it is an error.
func (r *reader) proposal() Proposal {
	p := Proposal{Type: r.u16("proposal type")}
	if r.err != nil {
		return p
	}
	switch p.Type {
	case ProposalAdd:
		p.Add = r.keyPackage()
	case ProposalUpdate:
		r.leafNode()
	case ProposalRemove:
		p.RemoveLeaf = r.u32("removed leaf")
	case ProposalPSK:
		r.preSharedKeyID()
	case ProposalReInit:
		r.vec("reinit group id")
		r.u16("reinit version")
		r.u16("reinit cipher suite")
		r.extensions("reinit extensions")
	case ProposalExternalInit:
		r.vec("kem output")
	case ProposalGroupContextExtensions:
		r.extensions("group context extensions")
	default:
		r.fail("unknown proposal type %d", p.Type)
	}
	return p
}

// preSharedKeyID reads PreSharedKeyID (RFC 9420 §8.4).
func (r *reader) preSharedKeyID() {
	switch t := r.u8("psk type"); t {
	case 1: // external
		r.vec("psk id")
	case 2: // resumption
		r.u8("resumption usage")
		r.vec("psk group id")
		r.u64("psk epoch")
	default:
		r.fail("unknown psk type %d", t)
	}
	r.vec("psk nonce")
}

// commit reads Commit (RFC 9420 §12.4): proposals<V> of ProposalOrRef, and an
// optional UpdatePath of which the committer's LeafNode is kept.
func (r *reader) commit() *Commit {
	c := &Commit{}
	outer := r.open("proposals")
	for r.more() {
		if len(c.Proposals) == MaxProposals {
			r.fail("commit of more than %d proposals", MaxProposals)
			break
		}
		switch t := r.u8("proposal or ref"); t {
		case 1:
			c.Proposals = append(c.Proposals, r.proposal())
		case 2:
			ref := r.vec("proposal ref")
			if ref == nil {
				ref = []byte{} // a reference, even an empty one, is non-nil
			}
			c.Proposals = append(c.Proposals, Proposal{ByRef: ref})
		default:
			r.fail("unknown proposal or ref type %d", t)
		}
	}
	r.close(outer, "proposals")
	switch present := r.u8("optional path"); present {
	case 0:
	case 1:
		leaf := r.leafNode()
		c.Path = &leaf
		outer := r.open("update path nodes")
		for r.more() {
			r.vec("encryption key")
			inner := r.open("encrypted path secrets")
			for r.more() {
				r.vec("kem output")
				r.vec("ciphertext")
			}
			r.close(inner, "encrypted path secrets")
		}
		r.close(outer, "update path nodes")
	default:
		r.fail("optional path flag %d is neither 0 nor 1", present)
	}
	return c
}

// keyPackage reads a KeyPackage (RFC 9420 §10), keeping its exact bytes.
func (r *reader) keyPackage() *KeyPackage {
	start := r.off
	if v := r.u16("key package version"); r.err == nil && v != 1 {
		r.fail("key package version %d is not mls10", v)
	}
	kp := &KeyPackage{CipherSuite: r.u16("cipher suite")}
	kp.InitKey = r.vec("init key")
	kp.Leaf = r.leafNode()
	r.extensions("key package extensions")
	tbs := r.off
	kp.Signature = r.vec("key package signature")
	if r.err == nil && r.off-start > MaxKeyPackage {
		r.fail("key package of %d bytes over 16 KiB", r.off-start)
	}
	if r.err != nil {
		return kp
	}
	kp.Raw = r.b[start:r.off:r.off]
	kp.tbs = r.b[start:tbs:tbs]
	return kp
}

// leafNode reads a LeafNode (RFC 9420 §7.2), keeping the bytes its signature
// covers.
func (r *reader) leafNode() LeafNode {
	start := r.off
	var n LeafNode
	n.EncryptionKey = r.vec("encryption key")
	n.SignatureKey = r.vec("signature key")
	n.CredentialType = r.u16("credential type")
	switch n.CredentialType {
	case CredentialBasic:
		n.Identity = r.vec("identity")
	case CredentialX509:
		outer := r.open("certificates")
		for r.more() {
			r.vec("certificate")
		}
		r.close(outer, "certificates")
	default:
		r.fail("unknown credential type %d", n.CredentialType)
	}
	n.Capabilities = Capabilities{
		Versions:     r.u16s("capability versions"),
		CipherSuites: r.u16s("capability cipher suites"),
		Extensions:   r.u16s("capability extensions"),
		Proposals:    r.u16s("capability proposals"),
		Credentials:  r.u16s("capability credentials"),
	}
	n.Source = r.u8("leaf node source")
	switch n.Source {
	case SourceKeyPackage:
		n.NotBefore = r.u64("not before")
		n.NotAfter = r.u64("not after")
	case SourceUpdate:
	case SourceCommit:
		n.ParentHash = r.vec("parent hash")
	default:
		r.fail("unknown leaf node source %d", n.Source)
	}
	r.extensions("leaf node extensions")
	tbs := r.off
	n.Signature = r.vec("leaf node signature")
	if r.err == nil {
		n.tbs = r.b[start:tbs:tbs]
	}
	return n
}
