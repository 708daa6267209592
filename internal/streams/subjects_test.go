package streams

import (
	"errors"
	"strings"
	"testing"

	"github.com/alpd-project/alpd/internal/bus"
)

// TestEnvelopeSubjectsRefuseHostileIDs (issue 10 finding 1): the builders
// that put an id from outside into a subject (an envelope id from a URL, a
// person id) refuse every id NATS would choke on or read as a pattern.
func TestEnvelopeSubjectsRefuseHostileIDs(t *testing.T) {
	const tenant, person, envelope = "example.org", "p_1-A", "0192f0c4-7b1e-7a00-8000-000000000001"
	builders := map[string]func(id string) (string, error){
		"SendSubject envelope":    func(id string) (string, error) { return SendSubject(tenant, person, id) },
		"SendSubject person":      func(id string) (string, error) { return SendSubject(tenant, id, envelope) },
		"DecidedSubject envelope": func(id string) (string, error) { return DecidedSubject(tenant, person, id) },
		"DecidedSubject person":   func(id string) (string, error) { return DecidedSubject(tenant, id, envelope) },
	}
	hostile := map[string]string{
		"4000 bytes":    strings.Repeat("a", 4000),
		"over the max":  strings.Repeat("a", bus.MaxTokenBytes+1),
		"empty":         "",
		"separator":     envelope + ".x",
		"wildcard":      "*",
		"full wildcard": ">",
		"space":         "a b",
		"newline":       "a\nPUB x 0",
		"control":       "a\x01",
		"non-ASCII":     "\u00e9",
	}
	for bname, build := range builders {
		if s, err := build("ok"); err != nil || !strings.HasPrefix(s, "alp.") {
			t.Fatalf("%s of a valid id: %q %v", bname, s, err)
		}
		for hname, id := range hostile {
			if s, err := build(id); !errors.Is(err, bus.ErrInvalidSubject) {
				t.Errorf("%s with a %s id: %.80q, %v; want bus.ErrInvalidSubject", bname, hname, s, err)
			}
		}
	}
}

// TestPolicyRulesSubject: a rule set's subject splits back into its
// tenant, party and owner, lies within the tenant's rules filter, and is no
// five-token policy subject (so the other aggregates' parser never
// mistakes one for theirs).
func TestPolicyRulesSubject(t *testing.T) {
	subj, err := PolicyRulesSubject("example.org", "sender", "p_alice")
	if err != nil {
		t.Fatal(err)
	}
	if want := "alp.policy.example_org.rules.sender.p_alice"; subj != want {
		t.Fatalf("subject %q, want %q", subj, want)
	}
	tok, party, owner, ok := ParsePolicyRulesSubject(subj)
	if !ok || tok != "example_org" || party != "sender" || owner != "p_alice" {
		t.Fatalf("parsed %q %q %q %v", tok, party, owner, ok)
	}
	if f := PolicyRulesFilter("example.org"); !strings.HasPrefix(subj, strings.TrimSuffix(f, ">")) {
		t.Fatalf("%s not within %s", subj, f)
	}
	if _, _, _, ok := ParsePolicySubject(subj); ok {
		t.Fatal("a rules subject parsed as a five-token policy subject")
	}
	if _, _, _, ok := ParsePolicyRulesSubject("alp.policy.example_org.conn.x"); ok {
		t.Fatal("a connection subject parsed as a rules subject")
	}
	if _, err := PolicyRulesSubject("example.org", "sender", "a.b"); err == nil {
		t.Fatal("an owner with a separator made a subject")
	}
}
