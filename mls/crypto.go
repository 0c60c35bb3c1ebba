package mls

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"errors"
	"hash"
)

// suite is what nah needs of a cipher suite (RFC 9420 §17.1): its hash, and
// its signature scheme when the standard library has it (Ed448, of suites 4
// and 6, it has not).
type suite struct {
	hash  func() hash.Hash
	curve elliptic.Curve // ECDSA; nil with ed25519 false: no verifier
	ed    bool           // Ed25519
}

var suites = map[uint16]suite{
	1: {hash: sha256.New, ed: true},                  // X25519, AES-128-GCM, SHA-256, Ed25519
	2: {hash: sha256.New, curve: elliptic.P256()},    // P-256, AES-128-GCM, SHA-256, P-256
	3: {hash: sha256.New, ed: true},                  // X25519, ChaCha20Poly1305, SHA-256, Ed25519
	4: {hash: sha512.New},                            // X448, AES-256-GCM, SHA-512, Ed448
	5: {hash: sha512.New, curve: elliptic.P521()},    // P-521, AES-256-GCM, SHA-512, P-521
	6: {hash: sha512.New},                            // X448, ChaCha20Poly1305, SHA-512, Ed448
	7: {hash: sha512.New384, curve: elliptic.P384()}, // P-384, AES-256-GCM, SHA-384, P-384
}

// Ref is RefHash("MLS 1.0 KeyPackage Reference", Raw) with the suite's hash (RFC 9420 §5.2).
func (kp *KeyPackage) Ref() ([]byte, error) {
	s, ok := suites[kp.CipherSuite]
	if !ok {
		return nil, ErrUnsupportedSuite
	}
	return refHash(s, "MLS 1.0 KeyPackage Reference", kp.Raw), nil
}

// Verify checks the LeafNode's signature (LeafNodeTBS, source key_package)
// and the KeyPackage's signature (KeyPackageTBS) with Leaf.SignatureKey,
// and that the init key is not the leaf's encryption key (RFC 9420 §10.1). Suites 1, 2, 3, 5 and 7 are verified; 4 and 6 (Ed448)
// and unknown suites give ErrUnsupportedSuite.
func (kp *KeyPackage) Verify() error {
	s, ok := suites[kp.CipherSuite]
	if !ok || (!s.ed && s.curve == nil) {
		return ErrUnsupportedSuite
	}
	if kp.tbs == nil || kp.Leaf.tbs == nil {
		return errors.New("mls: key package not parsed")
	}
	if kp.Leaf.Source != SourceKeyPackage {
		return errors.New("mls: key package's leaf node is not from a key package")
	}
	if bytes.Equal(kp.InitKey, kp.Leaf.EncryptionKey) {
		return errors.New("mls: key package's init key is the leaf's encryption key")
	}
	if !verifyWithLabel(s, kp.Leaf.SignatureKey, "LeafNodeTBS", kp.Leaf.tbs, kp.Leaf.Signature) {
		return errors.New("mls: leaf node signature does not verify")
	}
	if !verifyWithLabel(s, kp.Leaf.SignatureKey, "KeyPackageTBS", kp.tbs, kp.Signature) {
		return errors.New("mls: key package signature does not verify")
	}
	return nil
}

// refHash is Hash(RefHashInput{label, value}) (RFC 9420 §5.2).
func refHash(s suite, label string, value []byte) []byte {
	h := s.hash()
	h.Write(labeled(label, value))
	return h.Sum(nil)
}

// verifyWithLabel checks a signature over SignContent{"MLS 1.0 " + label,
// content} (RFC 9420 §5.1.2). ECDSA signatures are DER, keys uncompressed
// points (§5.1.1).
func verifyWithLabel(s suite, pub []byte, label string, content, sig []byte) bool {
	msg := labeled("MLS 1.0 "+label, content)
	if s.ed {
		return len(pub) == ed25519.PublicKeySize && ed25519.Verify(pub, msg, sig)
	}
	key, err := ecdsa.ParseUncompressedPublicKey(s.curve, pub)
	if err != nil {
		return false
	}
	h := s.hash()
	h.Write(msg)
	return ecdsa.VerifyASN1(key, h.Sum(nil), sig)
}

// labeled encodes struct { opaque label<V>; opaque value<V>; }.
func labeled(label string, value []byte) []byte {
	b := appendLength(nil, len(label))
	b = append(b, label...)
	b = appendLength(b, len(value))
	return append(b, value...)
}

// appendLength appends a vector length in its minimal variable-length form
// (RFC 9420 §2.1.2); n is below 2^30, which any parsed input is.
func appendLength(b []byte, n int) []byte {
	switch {
	case n < 1<<6:
		return append(b, byte(n))
	case n < 1<<14:
		return binary.BigEndian.AppendUint16(b, uint16(n)|0x4000)
	default:
		return binary.BigEndian.AppendUint32(b, uint32(n)|0x80000000)
	}
}
