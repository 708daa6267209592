package ledgerlog

import (
	"bytes"
	"encoding/hex"
	"testing"
	"time"
)

func TestEnvelopeDigest(t *testing.T) {
	f := EnvelopeFields{ID: "e1", From: "alice@a.example", To: "bob@b.example", Type: "meeting.propose",
		Body: []byte(`{"a":1,"b":"x"}`), Created: time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.FixedZone("x", 3600))}
	d1, err := EnvelopeDigest(f)
	if err != nil {
		t.Fatal(err)
	}
	// The same instant in another zone gives the same digest.
	g := f
	g.Created = f.Created.UTC()
	if d2, _ := EnvelopeDigest(g); d2 != d1 {
		t.Fatal("time zone changes the digest")
	}
	for name, mut := range map[string]func(*EnvelopeFields){
		"id": func(f *EnvelopeFields) { f.ID = "e2" }, "from": func(f *EnvelopeFields) { f.From = "x@a.example" },
		"to": func(f *EnvelopeFields) { f.To = "x@b.example" }, "type": func(f *EnvelopeFields) { f.Type = "t" },
		"body":    func(f *EnvelopeFields) { f.Body = []byte(`{"a":2,"b":"x"}`) },
		"created": func(f *EnvelopeFields) { f.Created = f.Created.Add(time.Nanosecond) },
		"expires": func(f *EnvelopeFields) { f.Expires = f.Created.Add(time.Hour) },
		"reply":   func(f *EnvelopeFields) { f.InReplyTo = "e0" },
	} {
		g := f
		mut(&g)
		if d, err := EnvelopeDigest(g); err != nil || d == d1 {
			t.Errorf("%s does not change the digest (%v)", name, err)
		}
	}
	for name, body := range map[string]string{
		"non-canonical": `{"b":"x","a":1}`, "whitespace": `{"a": 1}`, "big int": `{"a":9007199254740993}`,
		"not json": `{`, "empty": ``,
	} {
		g := f
		g.Body = []byte(body)
		if _, err := EnvelopeDigest(g); err == nil {
			t.Errorf("body %s accepted", name)
		}
	}
	g = f
	g.Created = time.Time{}
	if _, err := EnvelopeDigest(g); err == nil {
		t.Error("zero created accepted")
	}
}

func TestCommit(t *testing.T) {
	salt := bytes.Repeat([]byte{7}, SaltSize)
	d := [32]byte{1, 2, 3}
	c := Commit(salt, d)
	// Written out by hand: sha256("alp-ledger-commitment/v1\n" || salt || digest).
	msg := append(append([]byte("alp-ledger-commitment/v1\n"), salt...), d[:]...)
	if want := "sha256:" + hex.EncodeToString(sha256sum(msg)); c != want {
		t.Fatalf("%s != %s", c, want)
	}
	if err := CheckOpening(c, salt, d); err != nil {
		t.Fatal(err)
	}
	if CheckOpening(c, salt, [32]byte{1}) == nil || CheckOpening(c, salt[:31], d) == nil {
		t.Fatal("wrong opening accepted")
	}
	s1, _ := NewSalt()
	s2, _ := NewSalt()
	if len(s1) != SaltSize || bytes.Equal(s1, s2) {
		t.Fatal("salts")
	}
	if Commit(s1, d) == Commit(s2, d) {
		t.Fatal("salting does not hide equal digests")
	}
}
