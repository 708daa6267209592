package nmp

import (
	"strconv"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
)

// ToJSON renders a header in the NMP README's form, for NLIP replies and
// for people:
//
//	{"nmp_message":{"trust":{"level":2},
//	 "signals":{"urgency":0.5,"quality":0.5,"inhibition":0.0,"activation":0.5,"focus":0.5,"reward":0.0},
//	 "budget":{"max_tokens":5000,"tokens_used":42,"system_mode":"standard"},
//	 "trace":[{"agent":"ingress","action":"accept","tokens":0}]}}
//
// Signals are printed from their integer thousandths as exact decimals
// (Milli.String), never through a float. Trust is always present, on the
// NMP scale, unspecified printing as 0 (how it is read). Signals, budget and
// trace appear when the header has them; max_tokens only when set (0 means
// no limit) and system_mode only when specified. A trace entry's "agent" is
// the service ("ingress", or "agent" for an entry an agent declared: see
// AgentService); the broker-only details of an entry (duration, per-hop trust
// and reason, time, readiness, lag) are not part of the README form and are
// left out. The output is accepted by ParseAgentHeader when it is within
// its limits and every trace entry names its service.
//
// An invalid header (see Validate) or nil is an error.
func ToJSON(h *nmpv1.NmpHeader) ([]byte, error) {
	if h == nil {
		return nil, newError(CodeMalformed, "", "no header to render")
	}
	if err := Validate(h); err != nil {
		return nil, err
	}
	var w objWriter
	w.open("")
	w.open("nmp_message")
	w.open("trust")
	w.raw("level", strconv.Itoa(TrustToNMP(h.GetTrust())))
	w.close()
	if sig := h.GetSignals(); sig != nil {
		w.open("signals")
		for _, s := range AllSignals() {
			w.raw(s.String(), Get(sig, s).String())
		}
		w.close()
	}
	if b := h.GetBudget(); b != nil {
		w.open("budget")
		if b.GetMaxTokens() != 0 {
			w.raw("max_tokens", strconv.FormatUint(b.GetMaxTokens(), 10))
		}
		w.raw("tokens_used", strconv.FormatUint(b.GetTokensUsed(), 10))
		if name := ModeName(b.GetSystemMode()); name != "" {
			w.str("system_mode", name)
		}
		w.close()
	}
	if tr := h.GetTrace(); len(tr) > 0 {
		w.openArray("trace")
		for _, e := range tr {
			w.open("")
			w.str("agent", e.GetService())
			w.str("action", e.GetAction())
			w.raw("tokens", strconv.FormatUint(e.GetTokens(), 10))
			w.close()
		}
		w.closeArray()
	}
	w.close()
	w.close()
	return w.buf.Bytes(), nil
}
