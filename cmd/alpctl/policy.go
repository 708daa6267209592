package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/alpd-project/alpd/broker"
	"github.com/alpd-project/alpd/internal/httpjson"
)

// policyCmd runs `alpctl policy push`: an operator stores a party's Cedar
// rule set (POST /v1/ops/policy/push, policy's PushRuleSet), for bootstrap
// and GitOps. Exit codes: 0 stored, 1 refused (each problem printed as
// FILE:line:column) or failed, 3 the operator token refused (401, 429),
// 2 usage.
func policyCmd(ctx context.Context, base *url.URL, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "check" {
		return policyCheckCmd(ctx, base, args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "push" {
		fmt.Fprintln(stderr, "usage: alpctl policy push --tenant T --party P [--owner O] [--expect-version N] [--operator-token T] FILE")
		fmt.Fprintln(stderr, "       alpctl policy check --tenant T --from ADDRESS --to ADDRESS --type TYPE [--trust-class C] [--recipient-agents C,C] [--operator-token T] BODY.json")
		return 2
	}
	fs := flag.NewFlagSet("policy push", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tenant := fs.String("tenant", "", "the tenant (required)")
	party := fs.String("party", "", "sender, sender_org, recipient_org or recipient (required)")
	owner := fs.String("owner", "", "the person id for sender and recipient; the tenant for the organization sets (default)")
	expect := fs.Int64("expect-version", -1, "the version the file replaces (0: the template); default: whatever is current")
	token := fs.String("operator-token", "", "operator token (default: env ALPCTL_OPERATOR_TOKEN)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() != 1 || *tenant == "" || *party == "" {
		fmt.Fprintln(stderr, "usage: alpctl policy push --tenant T --party P [--owner O] [--expect-version N] [--operator-token T] FILE")
		return 2
	}
	if *token == "" {
		*token = os.Getenv("ALPCTL_OPERATOR_TOKEN")
	}
	file := fs.Arg(0)
	text, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintln(stderr, "alpctl:", err)
		return 1
	}
	req := broker.PolicyPushRequest{Tenant: *tenant, Party: *party, Owner: *owner, Text: string(text)}
	if *expect >= 0 {
		v := uint64(*expect)
		req.ExpectVersion = &v
	}
	body, _ := json.Marshal(req)
	resp, answer, err := opsPost(ctx, base.JoinPath("v1", "ops", "policy", "push"), *token, body)
	if err != nil {
		fmt.Fprintln(stderr, "alpctl:", err)
		return 1
	}
	if resp.StatusCode != http.StatusOK {
		printPushRefusal(stderr, file, resp, answer)
		return refusedExit(resp)
	}
	var res broker.PolicyPushResult
	if err := json.Unmarshal(answer, &res); err != nil {
		fmt.Fprintf(stderr, "alpctl: the answer is not a stored push: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "stored the %s set of %s in %s as version %d (sha256 %s)\n", res.Party, res.Owner, res.Tenant, res.Version, res.Digest)
	return 0
}

// opsPost posts to an operator endpoint, waiting out the operator's rate
// limit (429 with Retry-After) a few times: a GitOps run pushes several
// sets in a row, a script checks several messages.
func opsPost(ctx context.Context, u *url.URL, token string, body []byte) (*http.Response, []byte, error) {
	for attempt := 1; ; attempt++ {
		resp, answer, err := call(ctx, http.MethodPost, u, token, body)
		if err != nil || resp.StatusCode != http.StatusTooManyRequests || attempt == 5 {
			return resp, answer, err
		}
		wait, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if err != nil || wait < 0 || wait > 10 {
			return resp, answer, nil
		}
		select {
		case <-ctx.Done():
			return resp, answer, nil
		case <-time.After(time.Duration(wait)*time.Second + 50*time.Millisecond):
		}
	}
}

// printPushRefusal prints the refusal's code and message and each problem
// where an editor jumps to it (FILE:line:column).
func printPushRefusal(w io.Writer, file string, resp *http.Response, body []byte) {
	var p struct {
		httpjson.Problem
		Problems []broker.PolicyProblem `json:"problems"`
	}
	if json.Unmarshal(body, &p) != nil || p.Code == "" {
		fmt.Fprintf(w, "alpctl: push refused (%s): %s\n", resp.Status, body)
		return
	}
	fmt.Fprintf(w, "alpctl: push refused (%s): %s: %s\n", resp.Status, p.Code, p.Detail)
	for _, pr := range p.Problems {
		at := file
		if pr.Line > 0 {
			at = fmt.Sprintf("%s:%d:%d", file, pr.Line, pr.Column)
		}
		id := ""
		if pr.PolicyID != "" {
			id = fmt.Sprintf(" (policy %q)", pr.PolicyID)
		}
		fmt.Fprintf(w, "%s: %s: %s%s\n", at, pr.Code, pr.Message, id)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		fmt.Fprintf(w, "alpctl: retry after %ss\n", ra)
	}
}
