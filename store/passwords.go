package store

import (
	"crypto/sha256"
	"encoding/base64"

	"golang.org/x/crypto/bcrypt"
)

// Passwords are hashed with bcrypt. bcrypt reads only 72 bytes, and a
// password may be 256, so the password is first reduced with SHA-256 (its
// base64 is 44 bytes): nothing is silently truncated.
func prehash(password string) []byte {
	sum := sha256.Sum256([]byte(password))
	out := make([]byte, base64.StdEncoding.EncodedLen(len(sum)))
	base64.StdEncoding.Encode(out, sum[:])
	return out
}

// HashPassword hashes a password the way sign-up does, for fixtures and
// tools; cost 0 means bcrypt's default. It is CPU-bound (~50-80 ms at cost
// 10): app bounds how many run at once.
func HashPassword(password string, cost int) (string, error) {
	if cost == 0 {
		cost = bcrypt.DefaultCost
	}
	b, err := bcrypt.GenerateFromPassword(prehash(password), cost)
	return string(b), err
}

// CheckPassword reports whether password matches hash, made by
// HashPassword. It costs as much as HashPassword at the hash's cost.
func CheckPassword(hash []byte, password string) bool {
	return bcrypt.CompareHashAndPassword(hash, prehash(password)) == nil
}
