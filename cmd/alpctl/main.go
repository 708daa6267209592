// Command alpctl is the operator's and person's command line for alpd.
//
//	alpctl [--broker URL] status [--json]                 readiness; with an operator token every service and the streams
//	alpctl [--broker URL] trace [--json] [--via V]        broker traceroute (operator token)
//	alpctl [--broker URL] policy push --tenant T --party P [--owner O] FILE
//	                                                      store a party's Cedar rule set (operator token)
//	alpctl operator-token NAME                            a new operator token and its configured hash
//	alpctl certs --out DIR [--hosts H] [--roles R]        development CA and per-role certificates
//	alpctl nats-config --tenants T --out DIR [...]        nats-server configuration and per-role nkey seeds
//	alpctl ledger verify FILE [--since CP] [--state F]    verify an exported ledger, remembering its checkpoint
//	alpctl ledger match A B                               check two exported ledgers against each other
//	alpctl keys list|rotate|retire|revoke --tenant T ...  a stopped broker's keys, offline (its key file and KEK)
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/alpd-project/alpd/broker"
	"github.com/alpd-project/alpd/internal/httpjson"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("alpctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokerURL := fs.String("broker", envOr("ALPCTL_BROKER", "http://127.0.0.1:8080"), "base URL of the broker's HTTP listener (env ALPCTL_BROKER)")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for the broker")
	fs.Usage = func() {
		fmt.Fprintln(stderr, `usage:
  alpctl [--broker URL] status [--json] [--operator-token T]
  alpctl [--broker URL] trace [--json] [--via auto|grpc|bus] [--operator-token T]
  alpctl [--broker URL] policy push --tenant T --party P [--owner O] [--expect-version N] [--operator-token T] FILE
  alpctl operator-token NAME
  alpctl certs --out DIR [--hosts 127.0.0.1,localhost] [--days 30] [--roles all|ingress,…] [--force]
  alpctl nats-config --tenants a.org[,b.org] --out DIR [flags]
  alpctl ledger verify FILE [--since CHECKPOINT_FILE] [--state FILE] [--peer EXPORT] [--peer-key VKEY]
  alpctl ledger match A B
  alpctl keys list|rotate|retire|revoke [--config FILE] [--data-dir DIR] --tenant T [--purpose P] [...]`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	switch fs.Arg(0) {
	case "operator-token":
		return operatorTokenCmd(fs.Args()[1:], stdout, stderr)
	case "certs":
		return certsCmd(fs.Args()[1:], stdout, stderr)
	case "nats-config":
		return natsConfigCmd(fs.Args()[1:], stdout, stderr)
	case "ledger":
		return ledgerCmd(fs.Args()[1:], stdout, stderr)
	case "keys":
		return keysCmd(fs.Args()[1:], stdout, stderr)
	}
	base, err := url.Parse(*brokerURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		fmt.Fprintf(stderr, "alpctl: --broker %q is not an http(s) URL\n", *brokerURL)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	switch cmd := fs.Arg(0); cmd {
	case "status":
		return status(ctx, base, fs.Args()[1:], stdout, stderr)
	case "trace":
		return traceCmd(ctx, base, fs.Args()[1:], stdout, stderr)
	case "policy":
		return policyCmd(ctx, base, fs.Args()[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "alpctl: unknown command %q\n", cmd)
		fs.Usage()
		return 2
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// status prints the broker's readiness; exit code 0 only when ready, 3
// when the operator token is refused. With an operator token it reads the
// verbose /readyz (services, lag, streams); without one, the plain form
// anyone may read, which says only whether the process is ready.
func status(ctx context.Context, base *url.URL, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the broker's JSON answer")
	token := fs.String("operator-token", "", "operator token, for the services and streams (default: env ALPCTL_OPERATOR_TOKEN)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *token == "" {
		*token = os.Getenv("ALPCTL_OPERATOR_TOKEN")
	}
	u := base.JoinPath("readyz")
	if *token != "" {
		u.RawQuery = "verbose=1"
	}
	resp, body, err := call(ctx, http.MethodGet, u, *token, nil)
	if err != nil {
		fmt.Fprintln(stderr, "alpctl:", err)
		return 1
	}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusTooManyRequests {
		msg := problemText(body)
		fmt.Fprintf(stderr, "alpctl: status refused (%s): %s\n", resp.Status, msg)
		return 3
	}
	var r broker.Readiness
	if err := json.Unmarshal(body, &r); err != nil {
		fmt.Fprintf(stderr, "alpctl: broker answered %s with something that is not a readiness report: %v\n", resp.Status, err)
		return 1
	}
	switch {
	case *asJSON:
		stdout.Write(body)
	case *token == "":
		printStatus(stdout, r)
		fmt.Fprintln(stderr, "alpctl: services and streams are shown to operators: pass --operator-token or set ALPCTL_OPERATOR_TOKEN")
	default:
		printStatus(stdout, r)
	}
	if !r.Ready {
		return 1
	}
	return 0
}

// call sends one request to the broker, with a JSON body unless body is
// nil, and reads its answer (at most 1 MiB).
func call(ctx context.Context, method string, u *url.URL, token string, body []byte) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("broker at %s://%s unreachable: %w", u.Scheme, u.Host, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the answer: %w", err)
	}
	return resp, answer, nil
}

// problemText is an error answer's code and detail (httpjson.Problem), or
// the body as it came when it is not a problem.
// refusedExit is the exit code of an operator command the broker refused:
// 3 when the operator's token was (401, or its rate limit: 429), 1 otherwise.
func refusedExit(resp *http.Response) int {
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusTooManyRequests {
		return 3
	}
	return 1
}

func problemText(body []byte) string {
	var p httpjson.Problem
	if json.Unmarshal(body, &p) == nil && p.Code != "" {
		return p.Code + ": " + p.Detail
	}
	return string(body)
}

func printStatus(w io.Writer, r broker.Readiness) {
	state := "READY"
	if !r.Ready {
		state = "NOT READY: " + r.Error
	}
	fmt.Fprintf(w, "broker %s: %s\n", r.Broker, state)
	if len(r.Services) == 0 && len(r.Streams) == 0 {
		return // the plain /readyz, read without an operator token
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tREADY\tGRPC\tLAG\tERROR")
	for _, s := range r.Services {
		fmt.Fprintf(tw, "%s\t%v\t%s\t%d\t%s\n", s.Name, s.Ready, s.GRPC, s.Lag, s.Error)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STREAM\tOWNER\tRETENTION\tMAX AGE\tSUBJECTS / SOURCES")
	for _, s := range r.Streams {
		what := strings.Join(append(s.Subjects, s.Sources...), " ")
		ret := s.Retention
		if s.AppendOnly {
			ret += ", append-only"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Name, s.Owner, ret, s.MaxAge, what)
	}
	tw.Flush()
}
