package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alpd-project/alpd/broker"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/brokertest"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/policy/relationships"
)

// TestPolicyCheck: an operator runs hypothetical messages through the real
// sets and relationships. A stranger is refused by the hard rule; once the
// organization pre-approves its people, a meeting request crosses but for
// its free text (lee never opted in), named by party and policy id; a
// connection request dry run records nothing; bad input is refused.
func TestPolicyCheck(t *testing.T) {
	token, hash := broker.NewOperatorToken()
	r := brokertest.Start(t, broker.Config{Tenants: []string{"example.org"}, Operators: []broker.Operator{{Name: "ops", TokenSHA256: hash}}})
	r.Agent(t, "example.org", "sub-ana", "ana@example.org", "agent-ana", "alp.send")
	lee := r.Agent(t, "example.org", "sub-lee", "lee@example.org", "agent-lee", "alp.send")
	url := r.Srv.URL
	meeting := writeFile(t, "meeting.json", `{"subject":"Q3 plan","start":"2026-05-04T10:00:00-04:00","duration":"PT30M","attendees":["ana@example.org"]}`)
	check := func(typ, body string, extra ...string) (int, string, string) {
		args := append([]string{"--broker", url, "policy", "check", "--operator-token", token, "--tenant", "example.org",
			"--from", "ana@example.org", "--to", "lee@example.org", "--type", typ}, extra...)
		return alpctl(append(args, body)...)
	}

	code, out, errOut := check("meeting.request/v1", meeting)
	if code != 0 || !strings.Contains(out, "outcome: refuse") || !strings.Contains(out, "reason: broker: stranger") {
		t.Fatalf("to a stranger: exit %d\n%s%s", code, out, errOut)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rels, err := relationships.Open(ctx, r.B.Bus(), []string{"example.org"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rels.Close()
	if err := rels.SetOrgRule(ctx, "example.org", relationships.OrgRule{Kind: relationships.SameOrg}, true, &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_OPERATOR, Id: "ops"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		code, out, errOut = check("meeting.request/v1", meeting, "--trust-class", "company", "--recipient-agents", "consumer")
		if !strings.Contains(out, "outcome: deliver_partial") {
			return errNotYet(out + errOut)
		}
		return nil
	}, "the pre-approval reaches policy")
	for _, want := range []string{
		"relationship: org_preapproved as the sender sees it, org_preapproved as the recipient does; the recipient is on this broker",
		"recipient/freetext-off: freetext_not_opted_in",
		"consumer agents see: /attendees/0 /duration /start",
		"rule sets: sender:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "/subject") && !strings.Contains(line, "internal,freetext") {
			t.Errorf("the subject's line: %q", line)
		}
	}

	// A dry-run connection request is held, and nothing is recorded.
	req := writeFile(t, "req.json", `{"purpose":"introduction"}`)
	if code, out, errOut := check("connection.request/v1", req); code != 0 || !strings.Contains(out, "held for the person: connection_request") {
		t.Fatalf("connection request: exit %d\n%s%s", code, out, errOut)
	}
	if pending, err := rels.Pending("example.org", lee.Person.ID); err != nil || len(pending) != 0 {
		t.Fatalf("a dry run recorded %v (%v)", pending, err)
	}

	// Bad input.
	for _, tc := range []struct {
		name string
		args []string
		want string
		code int
	}{
		{"unknown sender", []string{"--broker", url, "policy", "check", "--operator-token", token, "--tenant", "example.org", "--from", "zed@example.org", "--to", "lee@example.org", "--type", "note/v1", meeting}, "unknown_sender", 1},
		{"foreign tenant", []string{"--broker", url, "policy", "check", "--operator-token", token, "--tenant", "other.example", "--from", "ana@other.example", "--to", "lee@example.org", "--type", "note/v1", meeting}, "invalid_request", 1},
		{"bad trust class", []string{"--broker", url, "policy", "check", "--operator-token", token, "--tenant", "example.org", "--from", "ana@example.org", "--to", "lee@example.org", "--type", "note/v1", "--trust-class", "root", meeting}, "trust_class", 1},
		{"not JSON", []string{"--broker", url, "policy", "check", "--operator-token", token, "--tenant", "example.org", "--from", "ana@example.org", "--to", "lee@example.org", "--type", "note/v1", writeFile(t, "x", "{")}, "is not JSON", 1},
		{"wrong token", []string{"--broker", url, "policy", "check", "--operator-token", broker.OperatorTokenPrefix + "wrong", "--tenant", "example.org", "--from", "ana@example.org", "--to", "lee@example.org", "--type", "note/v1", meeting}, "unauthorized", 3},
		{"usage", []string{"--broker", url, "policy", "check", meeting}, "usage", 2},
	} {
		code, out, errOut := alpctl(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d\n%s%s; want %d and %q", tc.name, code, out, errOut, tc.code, tc.want)
		}
	}
}

type errNotYet string

func (e errNotYet) Error() string { return "not yet: " + string(e) }
