package store

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"strings"
)

// newSecret returns n random bytes as unpadded base64url.
func newSecret(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// hashSecret is how tokens and codes are stored: a leaked database does not
// hand out working credentials. Secrets are random, so no salt is needed.
func hashSecret(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// Codes are typed by people, so they use an alphabet without look-alikes:
// 16 characters of Crockford-style base32 carry 80 random bits.
var codeEnc = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

const codeLen = 16

func newCode() string {
	var b [10]byte
	rand.Read(b[:])
	return codeEnc.EncodeToString(b[:])
}

// normCode lowercases a typed code and drops spaces and dashes.
func normCode(c string) string {
	c = strings.ToLower(c)
	return strings.Map(func(r rune) rune {
		if r == '-' || r == ' ' {
			return -1
		}
		return r
	}, c)
}
