package ledgerlog

import (
	"strings"
	"testing"
	"time"
)

// sampleApprovals are one entry of each approvals kind, every member set.
func sampleApprovals() map[string]Entry {
	base := Entry{V: EntryVersion, Log: Origin("b.example", "bob"), Index: 5, SourceEvent: "0192f0c4-0000-7000-8000-000000000009",
		Time: FormatTime(time.Date(2026, 11, 30, 16, 4, 8, 0, time.UTC))}
	expires := FormatTime(time.Date(2026, 12, 7, 16, 4, 8, 0, time.UTC))
	req, dec, created, revoked := base, base, base, base
	req.Kind, req.EnvelopeID, req.Counterparty = KindApprovalRequested, envID(1), "a.example"
	req.Item, req.HeldKind, req.PayloadDigest, req.BindingCode, req.Expires = "h1", HeldCommitment, strings.Repeat("ab", 32), "K7Q-4M", expires
	dec.Kind, dec.EnvelopeID, dec.Counterparty = KindApprovalDecision, envID(1), "a.example"
	dec.Item, dec.HeldKind, dec.State, dec.PayloadDigest, dec.Rule = "h1", HeldCommitment, StateApprovedAlways, strings.Repeat("ab", 32), "r1"
	created.Kind, created.Counterparty, created.Rule, created.Type, created.Action, created.Expires = KindRuleCreated, "a.example", "r1", "meeting.accept/v1", "meeting", expires
	revoked.Kind, revoked.Rule = KindRuleRevoked, "r1"
	return map[string]Entry{"requested": req, "decision": dec, "created": created, "revoked": revoked}
}

// TestApprovalEntries: each approvals kind round-trips through its
// canonical leaf, and refuses what it must not carry or lacks.
func TestApprovalEntries(t *testing.T) {
	for name, e := range sampleApprovals() {
		leaf, err := e.Canonical()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := ParseEntry(leaf)
		if err != nil || got.Kind != e.Kind || got.Rule != e.Rule || got.Item != e.Item {
			t.Fatalf("%s: parsed %+v %v", name, got, err)
		}
	}
	s := sampleApprovals()
	for name, c := range map[string]struct {
		kind string
		mut  func(*Entry)
	}{
		"requested without item":      {"requested", func(e *Entry) { e.Item = "" }},
		"requested without digest":    {"requested", func(e *Entry) { e.PayloadDigest = "" }},
		"requested without envelope":  {"requested", func(e *Entry) { e.EnvelopeID = "" }},
		"requested unknown held kind": {"requested", func(e *Entry) { e.HeldKind = "payment" }},
		"requested bad expires":       {"requested", func(e *Entry) { e.Expires = "2026-12-07" }},
		"requested with state":        {"requested", func(e *Entry) { e.State = StateDenied }},
		"requested with commitment":   {"requested", func(e *Entry) { e.Commitment = Commit(make([]byte, SaltSize), [32]byte{}) }},
		"decision without state":      {"decision", func(e *Entry) { e.State = "" }},
		"decision unknown state":      {"decision", func(e *Entry) { e.State = "pending" }},
		"decision with binding code":  {"decision", func(e *Entry) { e.BindingCode = "K7Q" }},
		"decision with outcome":       {"decision", func(e *Entry) { e.Outcome = OutcomeDeliver }},
		"rule without action":         {"created", func(e *Entry) { e.Action = "" }},
		"rule without type":           {"created", func(e *Entry) { e.Type = "" }},
		"rule with envelope":          {"created", func(e *Entry) { e.EnvelopeID = envID(1) }},
		"rule with item":              {"created", func(e *Entry) { e.Item = "h1" }},
		"revoked without rule":        {"revoked", func(e *Entry) { e.Rule = "" }},
		"revoked with action":         {"revoked", func(e *Entry) { e.Action = "meeting" }},
	} {
		e := s[c.kind]
		c.mut(&e)
		if _, err := e.Canonical(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// Approvals' members on another kind.
	e := sampleEntry()
	e.Rule = "r1"
	if _, err := e.Canonical(); err == nil {
		t.Error("a rule on envelope.send_requested: accepted")
	}
}
