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
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/alpd-project/alpd/broker"
)

const policyCheckUsage = "usage: alpctl policy check --tenant T --from ADDRESS --to ADDRESS --type TYPE [--trust-class consumer|company] [--recipient-agents consumer,company] [--operator-token T] BODY.json (- for stdin)"

// policyCheckCmd runs `alpctl policy check`: a hypothetical message
// through the broker's real rule sets, relationships and hard rules
// (POST /v1/ops/policy/check, policy's DryRun); it prints each field's
// verdict with party, policy id and reason. Nothing is sent or stored.
// Exit codes: 0 answered (whatever the outcome), 1 refused or failed, 3 the
// operator token refused (401, 429), 2 usage.
func policyCheckCmd(ctx context.Context, base *url.URL, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("policy check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tenant := fs.String("tenant", "", "the sender's tenant (required)")
	from := fs.String("from", "", "the sender's address, a person of the tenant (required)")
	to := fs.String("to", "", "the recipient's address (required)")
	typ := fs.String("type", "", "the message type, e.g. meeting.request/v1 (required)")
	class := fs.String("trust-class", "consumer", "the sending agent's trust class: consumer or company")
	agents := fs.String("recipient-agents", "", "the recipient's agents' trust classes, comma-separated (default: the recipient's agents as identity records them)")
	token := fs.String("operator-token", "", "operator token (default: env ALPCTL_OPERATOR_TOKEN)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 || *tenant == "" || *from == "" || *to == "" || *typ == "" {
		fmt.Fprintln(stderr, policyCheckUsage)
		return 2
	}
	if *token == "" {
		*token = os.Getenv("ALPCTL_OPERATOR_TOKEN")
	}
	var body []byte
	var err error
	if fs.Arg(0) == "-" {
		body, err = io.ReadAll(io.LimitReader(os.Stdin, 1<<20+1))
	} else {
		body, err = os.ReadFile(fs.Arg(0))
	}
	if err != nil {
		fmt.Fprintln(stderr, "alpctl:", err)
		return 1
	}
	if !json.Valid(body) {
		fmt.Fprintf(stderr, "alpctl: %s is not JSON\n", fs.Arg(0))
		return 1
	}
	req := broker.PolicyCheckRequest{Tenant: *tenant, From: *from, TrustClass: *class, To: *to, Type: *typ, Body: body}
	if *agents != "" {
		req.RecipientAgents = strings.Split(*agents, ",")
	}
	raw, _ := json.Marshal(req)
	resp, answer, err := opsPost(ctx, base.JoinPath("v1", "ops", "policy", "check"), *token, raw)
	if err != nil {
		fmt.Fprintln(stderr, "alpctl:", err)
		return 1
	}
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "alpctl: check refused (%s): %s\n", resp.Status, problemText(answer))
		return refusedExit(resp)
	}
	var res broker.PolicyCheckResult
	if err := json.Unmarshal(answer, &res); err != nil {
		fmt.Fprintf(stderr, "alpctl: the answer is not a check result: %v\n", err)
		return 1
	}
	printCheck(stdout, res)
	return 0
}

// printCheck writes the verdicts as a table a person reads and a script
// greps: one line per field, each reason as party/policy_id: code.
func printCheck(w io.Writer, res broker.PolicyCheckResult) {
	where := "a remote broker (only the sender side ran)"
	if res.RecipientLocal {
		where = "this broker"
	}
	fmt.Fprintf(w, "outcome: %s (sender side: %s)\n", res.Outcome, res.SenderOutcome)
	fmt.Fprintf(w, "relationship: %s as the sender sees it", res.SenderRelationship)
	if res.RecipientRelationship != "" {
		fmt.Fprintf(w, ", %s as the recipient does", res.RecipientRelationship)
	}
	fmt.Fprintf(w, "; the recipient is on %s\n", where)
	for _, r := range res.Reasons {
		fmt.Fprintf(w, "reason: %s\n", reasonText(r))
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FIELD\tCLASS\tACTION\tREASONS")
	for _, f := range res.Fields {
		class := f.Class
		if f.FreeText {
			class += ",freetext"
		}
		var rs []string
		for _, r := range f.Reasons {
			rs = append(rs, reasonText(r))
		}
		for _, d := range f.DLP {
			if !slices.ContainsFunc(f.Reasons, func(r broker.PolicyReason) bool { return r.Code == "dlp_"+d }) {
				rs = append(rs, "dlp flag: "+d)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Pointer, class, f.Action, strings.Join(rs, "; "))
	}
	_ = tw.Flush()
	for _, h := range res.Held {
		commits := ""
		if h.Commits != "" {
			commits = " (commits: " + h.Commits + ")"
		}
		fmt.Fprintf(w, "held for the person: %s%s: %s\n", h.Kind, commits, strings.Join(h.Pointers, " "))
	}
	classes := make([]string, 0, len(res.Views))
	for c := range res.Views {
		classes = append(classes, c)
	}
	slices.Sort(classes)
	for _, c := range classes {
		fmt.Fprintf(w, "%s agents see: %s\n", c, strings.Join(res.Views[c], " "))
	}
	if len(res.RuleVersions) > 0 {
		fmt.Fprintf(w, "rule sets: %s\n", strings.Join(res.RuleVersions, " "))
	}
}

func reasonText(r broker.PolicyReason) string {
	who := r.Party
	if r.PolicyID != "" {
		who += "/" + r.PolicyID
	}
	return who + ": " + r.Code
}
