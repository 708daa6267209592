package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A forbid an agent may add to its person's recipient rules.
const agentForbid = `
@id("agent-no-payments")
@reason("not_accepted")
forbid (principal, action == Alp::Action::"share_field", resource)
when { resource.commits == "payment" };
`

// TestPolicyRules runs the real alpd (all-in-one) and checks the rule
// writes of issue 12 from outside: an agent holding its person's personal
// access token reads the person's recipient rules, may add a forbid, and is
// refused (403 loosening_refused, nothing stored) when it tries to drop
// one; an operator pushes the organization's egress set with `alpctl
// policy push`, and a malformed file is refused with its line and column.
func TestPolicyRules(t *testing.T) {
	b := binaries(t)
	addr := freeAddr(t)
	token, op := operatorToken(t, b, "e2e-operator")
	configFile := filepath.Join(t.TempDir(), "alpd.yaml")
	writeYAML(t, configFile, map[string]any{
		"broker": map[string]any{"tenants": []map[string]string{{"domain": splitTenant}}},
		"ops":    map[string]any{"operators": []map[string]string{{"name": op.Name, "token_sha256": op.TokenSHA256}}},
		"identity": map[string]any{"test_idp": map[string]any{
			"enabled": true,
			"users":   []map[string]any{{"username": "ana", "password": "ana-pw"}},
		}},
	})
	p := startProc(t, "alpd", b.alpd, hermeticEnv(), "--config", configFile, "--data-dir", t.TempDir(), "--http-addr", addr)
	waitReady(t, p, addr)
	pat, person := signInAgent(t, addr, "ana", "alp.read", "alp.send")

	rules := func(method, ifMatch, text string) (int, string, map[string]any) {
		t.Helper()
		var body io.Reader
		if text != "" {
			body = strings.NewReader(text)
		}
		req, _ := http.NewRequest(method, "http://"+addr+"/v1/rules/recipient", body)
		req.Header.Set("Authorization", "Bearer "+pat)
		if ifMatch != "" {
			req.Header.Set("If-Match", ifMatch)
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatalf("%s /v1/rules/recipient: %v", method, err)
		}
		defer resp.Body.Close()
		var v map[string]any
		raw, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("%s /v1/rules/recipient: %d %s", method, resp.StatusCode, raw)
		}
		return resp.StatusCode, resp.Header.Get("ETag"), v
	}
	status, etag, set := rules(http.MethodGet, "", "")
	template, _ := set["text"].(string)
	if status != http.StatusOK || etag != `"0"` || set["owner"] != person || !strings.Contains(template, `@id("freetext-off")`) {
		t.Fatalf("the agent reads its person's recipient rules: %d %s %v; want the template at version 0", status, etag, set)
	}

	// Dropping the free-text forbid would open the person's inbox to free
	// text: an agent may not.
	start := strings.Index(template, `@id("freetext-off")`)
	end := start + strings.Index(template[start:], "};") + 2
	loosened := template[:start] + template[end:]
	status, _, refusal := rules(http.MethodPut, `"0"`, loosened)
	if status != http.StatusForbidden || refusal["code"] != "loosening_refused" {
		t.Fatalf("the agent loosens: %d %v; want 403 loosening_refused", status, refusal)
	}
	if status, etag, _ := rules(http.MethodGet, "", ""); status != http.StatusOK || etag != `"0"` {
		t.Fatalf("after the refused loosening: %d ETag %s; want version 0 still", status, etag)
	}
	status, etag, _ = rules(http.MethodPut, `"0"`, template+agentForbid)
	if status != http.StatusOK || etag != `"1"` {
		t.Fatalf("the agent adds a forbid: %d ETag %s; want 200 and version 1", status, etag)
	}
	if _, _, set := rules(http.MethodGet, "", ""); set["by"] != "agent" || set["tightening_only"] != true {
		t.Fatalf("the stored version: %v; want it written by the agent, tightening only", set)
	}

	// The operator's push.
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.cedar")
	good := filepath.Join(dir, "egress.cedar")
	os.WriteFile(bad, []byte("@id(\"a\")\n@reason(\"r\")\npermit (principal, action, resource)\nwhen { resource.class = \"public\" };\n"), 0o600)
	os.WriteFile(good, []byte("@id(\"egress-connected\")\n@reason(\"egress_permits\")\npermit (principal, action == Alp::Action::\"share_field\", resource)\nwhen { context.relationship == \"connected\" };\n"), 0o600)
	env := hermeticEnv("ALPCTL_OPERATOR_TOKEN=" + token)
	res := runTool(t, b.alpctl, env, "--broker", "http://"+addr, "policy", "push", "--tenant", splitTenant, "--party", "sender_org", bad)
	if res.code != 1 || !strings.Contains(res.stderr, bad+":4:") || !strings.Contains(res.stderr, "cedar_parse") {
		t.Fatalf("alpctl policy push of a malformed file: exit %d\n%s%s; want 1 and %s:4:…: cedar_parse", res.code, res.stdout, res.stderr, bad)
	}
	res = runTool(t, b.alpctl, env, "--broker", "http://"+addr, "policy", "push", "--tenant", splitTenant, "--party", "sender_org", "--expect-version", "0", good)
	if res.code != 0 || !strings.Contains(res.stdout, "version 1") {
		t.Fatalf("alpctl policy push: exit %d\n%s%s; want version 1", res.code, res.stdout, res.stderr)
	}
	p.stop(t)
}
