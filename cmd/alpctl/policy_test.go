package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alpd-project/alpd/broker"
)

// egress is a valid sender_org set.
const egress = `@id("egress-connected")
@reason("egress_permits")
permit (principal, action == Alp::Action::"share_field", resource)
when { context.relationship == "connected" };
`

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPolicyPush: an operator pushes an organization's and a person's set;
// a malformed file is refused with FILE:line:column and stores nothing (the
// next push expecting the template is version 1); a stale expected version
// is a version_conflict; without a token the push is refused (exit 3).
func TestPolicyPush(t *testing.T) {
	token, hash := broker.NewOperatorToken()
	url := runBroker(t, broker.Operator{Name: "ops", TokenSHA256: hash})
	push := func(args ...string) (int, string, string) {
		return alpctl(append([]string{"--broker", url, "policy", "push", "--operator-token", token, "--tenant", "example.org"}, args...)...)
	}

	bad := writeFile(t, "bad.cedar", "@id(\"a\")\n@reason(\"r\")\npermit (principal, action == Alp::Action::\"share_field\", resource)\nwhen { resource.class == };\n")
	code, out, errOut := push("--party", "sender_org", "--expect-version", "0", bad)
	if code != 1 || !strings.Contains(errOut, bad+":4:") || !strings.Contains(errOut, "cedar_parse") {
		t.Fatalf("malformed push: exit %d\n%s%s; want 1 and %s:4:…: cedar_parse", code, out, errOut, bad)
	}
	unknown := writeFile(t, "attr.cedar", "@id(\"a\")\n@reason(\"r\")\nforbid (principal, action == Alp::Action::\"share_field\", resource)\nwhen { resource.colour == \"red\" };\n")
	if code, _, errOut := push("--party", "sender_org", unknown); code != 1 || !strings.Contains(errOut, "unknown_attribute") || !strings.Contains(errOut, `(policy "a")`) {
		t.Fatalf("unknown attribute: exit %d\n%s", code, errOut)
	}

	good := writeFile(t, "egress.cedar", egress)
	code, out, errOut = push("--party", "sender_org", "--expect-version", "0", good)
	if code != 0 || !strings.Contains(out, "version 1") {
		t.Fatalf("push: exit %d\n%s%s; want version 1 (the refusals stored nothing)", code, out, errOut)
	}
	if code, _, errOut := push("--party", "sender_org", "--expect-version", "0", good); code != 1 || !strings.Contains(errOut, "version_conflict") {
		t.Fatalf("stale push: exit %d\n%s; want version_conflict", code, errOut)
	}
	if code, out, errOut := push("--party", "sender_org", good); code != 0 || !strings.Contains(out, "version 2") {
		t.Fatalf("push over the current version: exit %d\n%s%s; want version 2", code, out, errOut)
	}
	// A person's set, by person id.
	if code, out, errOut := push("--party", "recipient", "--owner", "p_ana", good); code != 0 || !strings.Contains(out, "recipient set of p_ana") {
		t.Fatalf("person's push: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := push("--party", "boss", good); code != 1 || !strings.Contains(errOut, "unknown_party") {
		t.Fatalf("unknown party: exit %d\n%s", code, errOut)
	}

	code, _, errOut = alpctl("--broker", url, "policy", "push", "--operator-token", broker.OperatorTokenPrefix+"wrong", "--tenant", "example.org", "--party", "sender_org", good)
	if code != 3 || !strings.Contains(errOut, "unauthorized") {
		t.Fatalf("push with a wrong token: exit %d\n%s; want 3", code, errOut)
	}
	if code, _, _ := alpctl("--broker", url, "policy", "push", good); code != 2 {
		t.Fatalf("push without --tenant and --party: exit %d, want 2 (usage)", code)
	}
}
