package mls

import (
	"encoding/hex"
	"os"
	"regexp"
	"testing"
)

// FuzzParse: no input makes Parse panic or return more than its limits; a
// message that parses is refused with a byte more or a byte less; a
// KeyPackage in it can be hashed and verified without a panic. Seeded with
// every hex string of the vectors in testdata/ and the messages the tests build.
func FuzzParse(f *testing.F) {
	hexes := regexp.MustCompile(`"([0-9a-f]{8,})"`)
	for _, name := range []string{"messages.json", "welcome.json", "passive-client-handling-commit.json"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		for _, m := range hexes.FindAllSubmatch(b, -1) {
			if b, err := hex.DecodeString(string(m[1])); err == nil {
				f.Add(b)
			}
		}
	}
	f.Add(commit(add(keyPackage(testKey, "c_1")), remove(1), byRef([]byte{1})))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			return
		}
		if _, err := Parse(append(b[:len(b):len(b)], 0)); err == nil {
			t.Fatal("a trailing byte accepted")
		}
		if _, err := Parse(b[:len(b)-1]); err == nil {
			t.Fatal("a message without its last byte accepted")
		}
		kps := []*KeyPackage{m.KeyPackage}
		if m.Commit != nil {
			if len(m.Commit.Proposals) > MaxProposals {
				t.Fatalf("%d proposals", len(m.Commit.Proposals))
			}
			for _, p := range m.Commit.Proposals {
				kps = append(kps, p.Add)
			}
		}
		if m.Welcome != nil && len(m.Welcome.NewMembers) > MaxWelcomeMembers {
			t.Fatalf("%d welcome members", len(m.Welcome.NewMembers))
		}
		for _, kp := range kps {
			if kp == nil {
				continue
			}
			if len(kp.Raw) > MaxKeyPackage || len(kp.Raw) > len(b) {
				t.Fatalf("key package of %d bytes", len(kp.Raw))
			}
			kp.Ref()
			kp.Verify()
		}
	})
}

// BenchmarkParseCommit150Adds: the commit that adds a family's 150 devices,
// each with a real KeyPackage of welcome.json (suite 1, 316 bytes), as the
// server reads it on POST .../group/commits; and Verify of one KeyPackage.
func BenchmarkParseCommit150Adds(b *testing.B) {
	var vs []struct {
		KeyPackage string `json:"key_package"`
	}
	load(b, "welcome.json", &vs)
	kpMsg, _ := hex.DecodeString(vs[0].KeyPackage)
	adds := make([][]byte, 150)
	for i := range adds {
		adds[i] = add(kpMsg[4:])
	}
	msg := commit(adds...)
	b.Run("parse", func(b *testing.B) {
		b.SetBytes(int64(len(msg)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Parse(msg); err != nil {
				b.Fatal(err)
			}
		}
	})
	kp, err := ParseKeyPackage(kpMsg)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("verify", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := kp.Verify(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
