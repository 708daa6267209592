package natsauth

import (
	"fmt"
	"strings"

	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/streams"
)

// Markers around the part of docs/nats-permissions.md that Markdown renders.
const (
	DocBegin = "<!-- BEGIN GENERATED from internal/natsauth: ALPD_UPDATE_DOCS=1 go test ./internal/natsauth rewrites it -->"
	DocEnd   = "<!-- END GENERATED -->"
)

// Placeholders the documentation renders the table with.
const (
	docNS     = "<ns>"
	docTenant = "<tenant>"
)

// Markdown renders the table and every role's allow-lists, with the broker
// name and tenant as placeholders, for docs/nats-permissions.md.
func Markdown() string {
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format+"\n", args...) }
	code := func(items []string) string {
		if len(items) == 0 {
			return "—"
		}
		out := make([]string, len(items))
		for i, s := range items {
			out[i] = "`" + s + "`"
		}
		return strings.Join(out, ", ")
	}
	NS := func(n string) string { return bus.StreamName(docNS, n) }

	p("## The table")
	p("")
	p("| role | publishes events on | receives events of (through its consumers) | owns streams | durable consumers | shared streams | KV buckets |")
	p("|---|---|---|---|---|---|---|")
	for _, u := range Table() {
		var pubs, cons, owns, durs, shared []string
		for _, k := range u.Publishes {
			pubs = append(pubs, streams.TenantFilter(k, docTenant))
		}
		for _, k := range u.Consumes {
			cons = append(cons, streams.TenantFilter(k, docTenant))
		}
		for _, s := range u.Owns {
			owns = append(owns, NS(s))
		}
		for _, c := range u.Consumers {
			durs = append(durs, NS(c.Durable)+" on "+NS(c.Stream))
		}
		for _, s := range u.Shared {
			shared = append(shared, NS(s))
		}
		b := "—"
		for i, k := range u.Buckets {
			s := fmt.Sprintf("`%s` (%s: %s)", NS(k.Name), k.Access, k.Why)
			if i == 0 {
				b = s
			} else {
				b += "; " + s
			}
		}
		p("| %s | %s | %s | %s | %s | %s | %s |", envelope.ServiceName(u.Role), code(pubs), code(cons), code(owns),
			code(durs), code(shared), b)
	}
	p("")
	p("## Allow-lists")
	p("")
	p("Rendered for broker name `%s` (`%s` where upper-cased) and one tenant `%s`: in `alp.` subjects `%s` is the", docNS, strings.ToUpper(docNS), docTenant, docTenant)
	p("tenant token (dots as underscores), in data-key bucket keys the domain itself. A broker with several tenants")
	p("repeats each tenant line once per tenant. Every user also has `allow_responses: true`. Anything not listed is")
	p("denied.")
	for _, u := range Table() {
		name := envelope.ServiceName(u.Role)
		pub, sub, _ := rules(docNS, []string{docTenant}, u.Role)
		p("")
		p("### %s", name)
		p("")
		p("| publish | why |")
		p("|---|---|")
		for _, r := range pub {
			p("| `%s` | %s |", r.Subject, r.Why)
		}
		p("")
		p("| subscribe | why |")
		p("|---|---|")
		for _, r := range sub {
			p("| `%s` | %s |", r.Subject, r.Why)
		}
	}
	return w.String()
}
