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
	"text/tabwriter"

	"github.com/alpd-project/alpd/broker"
)

// traceCmd runs a broker traceroute: POST /v1/ops/trace with the operator
// token. Exit codes: 0 every hop ready, 1 a hop not ready or unreachable,
// 3 refused (401, 429), 2 usage.
func traceCmd(ctx context.Context, base *url.URL, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("trace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, `print {"trace":[…]} as JSON`)
	via := fs.String("via", broker.ViaAuto, "transport between hops: auto, grpc or bus")
	token := fs.String("operator-token", "", "operator token (default: env ALPCTL_OPERATOR_TOKEN)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *token == "" {
		*token = os.Getenv("ALPCTL_OPERATOR_TOKEN")
	}
	u := base.JoinPath("v1", "ops", "trace")
	u.RawQuery = url.Values{"via": {*via}}.Encode()
	resp, body, err := call(ctx, http.MethodPost, u, *token, nil)
	if err != nil {
		fmt.Fprintln(stderr, "alpctl:", err)
		return 1
	}
	if resp.StatusCode != http.StatusOK {
		msg := problemText(body)
		fmt.Fprintf(stderr, "alpctl: trace refused (%s): %s\n", resp.Status, msg)
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			fmt.Fprintf(stderr, "alpctl: retry after %ss\n", ra)
		}
		return refusedExit(resp)
	}
	var res broker.TraceResult
	if err := json.Unmarshal(body, &res); err != nil {
		fmt.Fprintf(stderr, "alpctl: the answer is not a trace: %v\n", err)
		return 1
	}
	if *asJSON {
		_ = json.NewEncoder(stdout).Encode(struct {
			Trace []broker.Hop `json:"trace"`
		}{res.Trace})
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "#\tSERVICE\tACTION\tVIA\tREADY\tTRUST\tLAG\tSERVICE µs\tROUND TRIP µs\tERROR")
		for i, h := range res.Trace {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%v\t%d\t%d\t%d\t%d\t%s\n", i+1, h.Service, h.Action, h.Via, h.Ready, h.Trust, h.Lag, h.DurationUS, h.RoundTripUS, h.Error)
		}
		tw.Flush()
	}
	if !res.Ready {
		return 1
	}
	return 0
}

// operatorTokenCmd prints a new operator token (once) and the hash to put
// in the broker's configuration.
func operatorTokenCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || args[0] == "" || args[0][0] == '-' {
		fmt.Fprintln(stderr, "usage: alpctl operator-token NAME")
		return 2
	}
	token, hash := broker.NewOperatorToken()
	fmt.Fprintf(stdout, "token (shown once; give it to %s, e.g. as ALPCTL_OPERATOR_TOKEN):\n  %s\n\n", args[0], token)
	fmt.Fprintf(stdout, "broker configuration:\nops:\n  operators:\n    - name: %s\n      token_sha256: %s\n", args[0], hash)
	return 0
}
