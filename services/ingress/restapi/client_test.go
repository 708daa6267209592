package restapi_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/alpd-project/alpd/services/ingress/restapi"
	"github.com/alpd-project/alpd/services/ingress/restapi/internal/agentclient"
)

// client is the generated client with token as bearer, its exchanges
// checked against the document like every other request of the tests.
func (r *rig) client(t *testing.T, token string) *agentclient.ClientWithResponses {
	t.Helper()
	c, err := agentclient.NewClientWithResponses(r.br.Srv.URL,
		agentclient.WithHTTPClient(&http.Client{Transport: r.check}),
		agentclient.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+token)
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A client generated from the OpenAPI document (oapi-codegen) lists the
// types, reads a schema, sends with an idempotency key, reads the outcome
// and the inbox, and reads a refusal as a problem with its stable code,
// all against a whole broker with real PATs and tokens.
func TestGeneratedClient(t *testing.T) {
	r := newLeeRig(t)
	ctx := context.Background()
	muse := r.client(t, r.muse)

	limit := 100
	types, err := muse.ListTypesWithResponse(ctx, &agentclient.ListTypesParams{Limit: &limit})
	if err != nil || types.JSON200 == nil {
		t.Fatalf("list types: %v %s", err, types.Body)
	}
	if !slices.ContainsFunc(types.JSON200.Items, func(ti agentclient.TypeInfo) bool { return ti.Name == "briefing.reply/v1" }) {
		t.Errorf("types: %+v", types.JSON200.Items)
	}
	schema, err := muse.GetTypeSchemaWithResponse(ctx, "briefing.reply/v1")
	if err != nil || schema.ApplicationschemaJSON200 == nil || (*schema.ApplicationschemaJSON200)["title"] != "briefing.reply/v1" {
		t.Fatalf("type schema: %v %d %s", err, schema.StatusCode(), schema.Body)
	}

	// dot (ana's company agent, OAuth) sends to lee through the client.
	dot := r.client(t, r.dot.Token)
	key := "briefing-1"
	var sent *agentclient.Outcome
	r.eventually(t, func() bool {
		resp, err := dot.SendMessageWithResponse(ctx, &agentclient.SendMessageParams{IdempotencyKey: &key}, agentclient.SendRequest{
			To: "lee@example.org", Type: "briefing.reply/v1",
			Body: map[string]any{"summary": "Q3 is fine", "pipeline": map[string]any{"currency": "EUR", "value": "120000.00"}}})
		if err != nil {
			t.Fatal(err)
		}
		sent = resp.JSON200
		return sent != nil && sent.Outcome != agentclient.OutcomeOutcomeRefuse
	}, "the client's send is delivered")
	status, err := dot.GetMessageStatusWithResponse(ctx, sent.EnvelopeId)
	if err != nil || status.JSON200 == nil || status.JSON200.Outcome != sent.Outcome {
		t.Errorf("status: %v %s", err, status.Body)
	}

	// Muse, a REST agent with a PAT, receives it with the broker's sender
	// line and without the confidential figure.
	var page *agentclient.InboxPage
	r.eventually(t, func() bool {
		resp, err := muse.ListInboxWithResponse(ctx, &agentclient.ListInboxParams{})
		page = resp.JSON200
		return err == nil && page != nil && len(page.Items) == 1
	}, "muse's inbox has the briefing")
	it := page.Items[0]
	if it.Id != sent.EnvelopeId.String() || it.Sender.Text != "from ana@example.org, verified by this broker" ||
		it.Body == nil || (*it.Body)["pipeline"] != nil {
		t.Errorf("muse's item: %+v", it)
	}
	ack, err := muse.AckInboxItemWithResponse(ctx, it.Id)
	if err != nil || ack.JSON200 == nil || ack.JSON200.Acked != 1 {
		t.Errorf("ack: %v %s", err, ack.Body)
	}

	// A refusal is a problem the client decodes, with its stable code.
	from := "bo@example.org"
	forged, err := dot.SendMessageWithResponse(ctx, nil, agentclient.SendRequest{To: "lee@example.org", Type: "note/v1",
		Body: map[string]any{"text": "hi"}, From: &from})
	if err != nil || forged.ApplicationproblemJSON403 == nil || forged.ApplicationproblemJSON403.Code != agentclient.ProblemCodeSenderMismatch {
		t.Errorf("a forged sender: %v %d %s", err, forged.StatusCode(), forged.Body)
	}
}

// TestGeneratedClientIsFresh regenerates the client with the pinned
// oapi-codegen (tools/go.mod) and fails on any difference from the
// committed code: the document and the client never drift apart.
func TestGeneratedClientIsFresh(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: not regenerating the client")
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "services", "ingress", "restapi", "internal", "agentclient")
	out := filepath.Join(t.TempDir(), "client.gen.go")
	cmd := exec.Command("go", "tool", "-modfile="+filepath.Join(root, "tools", "go.mod"), "oapi-codegen",
		"-config", filepath.Join(dir, "oapi-codegen.yaml"), "-o", out, filepath.Join(root, "services", "ingress", "restapi", "openapi.yaml"))
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("oapi-codegen: %v\n%s", err, msg)
	}
	fresh, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(filepath.Join(dir, "client.gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fresh, committed) {
		t.Errorf("services/ingress/restapi/internal/agentclient/client.gen.go differs from a fresh generation: run go generate ./services/ingress/restapi/...")
	}
	if !bytes.Contains(committed, []byte(restapi.PathMessages)) {
		t.Error("the generated client does not call the send route")
	}
}
