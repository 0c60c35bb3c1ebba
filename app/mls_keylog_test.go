package app

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nah-app/nah"
)

// auditKeyLog is what a phone does with a person's key log: fetch it all,
// recompute the chain from hash_0 with docs/api.md's entry encoding, check
// the head's signature with the server's key, and check that the head it
// pinned before (size, hash) is a prefix of this one. It returns the new
// head, or why the log cannot be trusted.
func auditKeyLog(t *testing.T, ts *testServer, token, person string, pinSize int, pinHash []byte) (int, []byte, error) {
	t.Helper()
	kr := ts.do(t, "GET", "/api/v1/key_log/key", token, nil)
	key, _ := base64.StdEncoding.DecodeString(kr.str("public_key"))
	r := ts.do(t, "GET", "/api/v1/people/"+person+"/key_log?after=0", token, nil)
	if r.status != 200 {
		t.Fatalf("key log: %d %s", r.status, r.raw)
	}
	hash := make([]byte, 32)
	entries := r.json["entries"].([]any)
	for i, e := range entries {
		e := e.(map[string]any)
		kind := byte(1)
		if e["kind"] == "client_removed" {
			kind = 2
		}
		at, _ := time.Parse(nah.TimeFormat, e["at"].(string))
		sig, _ := base64.StdEncoding.DecodeString(e["signature_key"].(string))
		client := e["client"].(string)
		b := append([]byte{kind, byte(len(client))}, client...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(sig)))
		b = append(b, sig...)
		b = binary.BigEndian.AppendUint64(b, uint64(at.UnixMilli()))
		h := sha256.Sum256(append(bytes.Clone(hash), b...))
		hash = h[:]
		if hex.EncodeToString(hash) != e["hash"] {
			return 0, nil, fmt.Errorf("entry %d of %s's key log does not follow from the ones before", i+1, person)
		}
		if i+1 == pinSize && !bytes.Equal(hash, pinHash) {
			return 0, nil, fmt.Errorf("%s's key log no longer extends the head pinned at %d", person, pinSize)
		}
	}
	head := r.json["head"].(map[string]any)
	sig, _ := base64.StdEncoding.DecodeString(head["signature"].(string))
	signed := append([]byte("nah key log v1"), person...)
	signed = binary.BigEndian.AppendUint64(signed, uint64(len(entries)))
	signed = append(signed, hash...)
	if head["size"] != float64(len(entries)) || head["hash"] != hex.EncodeToString(hash) || !ed25519.Verify(key, signed, sig) {
		return 0, nil, fmt.Errorf("%s's key log head %v is not the chain's, signed by the server's key", person, head)
	}
	if len(entries) < pinSize {
		return 0, nil, fmt.Errorf("%s's key log shrank from %d to %d", person, pinSize, len(entries))
	}
	return len(entries), hash, nil
}

// TestMLSKeyLog: clients added and removed make a chain a phone can audit,
// signed with a key that survives a restart; a key swapped in the person's
// file behind the API breaks the chain, and a chain rewritten to hide it
// no longer extends the head the phone pinned.
func TestMLSKeyLog(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer(t, func(c *serverConfig) { c.Dir = dir })
	ann, bob := ts.signup(t, "ann"), ts.signup(t, "bob")
	ts.connect(t, ann, bob)
	c1 := ts.addClient(t, ann)
	ts.addClient(t, ann)
	if r := ts.do(t, "DELETE", "/api/v1/me/clients/"+c1.id, ann.token, nil); r.status != 204 {
		t.Fatalf("remove a client: %d %s", r.status, r.raw)
	}
	size, pin, err := auditKeyLog(t, ts, bob.token, ann.id, 0, nil)
	if err != nil || size != 3 {
		t.Fatalf("bob's audit of ann's key log: %d entries, %v", size, err)
	}
	key := ts.do(t, "GET", "/api/v1/key_log/key", bob.token, nil).str("public_key")
	r := ts.do(t, "GET", "/api/v1/people/"+ann.id+"/clients", bob.token, nil)
	if kl := r.json["key_log"].(map[string]any); kl["size"] != 3.0 || kl["hash"] != hex.EncodeToString(pin) {
		t.Errorf("ann's clients' key log head: %v", kl)
	}
	if r := ts.do(t, "GET", "/api/v1/people/"+ann.id+"/key_log", ts.signup(t, "eve").token, nil); r.status != 404 {
		t.Errorf("a stranger reads the key log: %d", r.status)
	}
	ts.Close()
	ts.store.Close()

	ts = newTestServer(t, func(c *serverConfig) { c.Dir = dir })
	if got := ts.do(t, "GET", "/api/v1/key_log/key", bob.token, nil).str("public_key"); got != key {
		t.Errorf("the key log key after a restart: %s, was %s", got, key)
	}
	if _, _, err := auditKeyLog(t, ts, bob.token, ann.id, size, pin); err != nil {
		t.Errorf("after a restart: %v", err)
	}
	ts.Close()
	ts.store.Close()

	// Offline, a planted key: client 2's entry names another key.
	evil := mlsClient{priv: newMLSKey()}.pub()
	plant := func(q string, args ...any) {
		db, err := sql.Open("sqlite", filepath.Join(dir, filepath.FromSlash(nah.PersonDirRel(ann.id)), nah.PersonFileName))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	plant(`UPDATE mls_key_log SET signature_key = ? WHERE pos = 2`, evil)
	ts = newTestServer(t, func(c *serverConfig) { c.Dir = dir })
	if _, _, err := auditKeyLog(t, ts, bob.token, ann.id, size, pin); err == nil {
		t.Error("a key swapped in the file passes the audit")
	} else {
		t.Log(err)
	}
	ts.Close()
	ts.store.Close()

	// The same, with every hash after it recomputed: the chain holds, and
	// the head the phone pinned is no longer on it.
	prev := make([]byte, 32)
	db, err := sql.Open("sqlite", filepath.Join(dir, filepath.FromSlash(nah.PersonDirRel(ann.id)), nah.PersonFileName))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query(`SELECT pos, kind, client, signature_key, at FROM mls_key_log ORDER BY pos`)
	if err != nil {
		t.Fatal(err)
	}
	var fixes [][2]any
	for rows.Next() {
		var pos, at int64
		var kind, client string
		var sk []byte
		rows.Scan(&pos, &kind, &client, &sk, &at)
		k := byte(1)
		if kind == "client_removed" {
			k = 2
		}
		b := append([]byte{k, byte(len(client))}, client...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(sk)))
		b = binary.BigEndian.AppendUint64(append(b, sk...), uint64(at))
		h := sha256.Sum256(append(prev, b...))
		prev = h[:]
		fixes = append(fixes, [2]any{pos, prev})
	}
	rows.Close()
	for _, f := range fixes {
		if _, err := db.Exec(`UPDATE mls_key_log SET hash = ? WHERE pos = ?`, f[1], f[0]); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	ts = newTestServer(t, func(c *serverConfig) { c.Dir = dir })
	if _, _, err := auditKeyLog(t, ts, bob.token, ann.id, size, pin); err == nil {
		t.Error("a key swapped in the file, its chain rewritten, passes the audit of a phone that pinned the head before")
	} else {
		t.Log(err)
	}
	if _, _, err := auditKeyLog(t, ts, bob.token, ann.id, 0, nil); err != nil {
		t.Errorf("the rewritten chain is a chain (what a phone with no pin sees): %v", err)
	}
}
