package nmp

import (
	"bytes"
	"encoding/json"
	"strconv"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
)

// Where an agent puts its NMP header in an NLIP message: a submessage with
// this label, format and subformat whose content is the JSON object
// ParseAgentHeader reads.
const (
	SubmessageLabel     = "nmp"
	SubmessageFormat    = "structured"
	SubmessageSubformat = "json"
)

// AgentHeader is what an agent claimed in its NMP header. Nothing in it is
// trusted: Apply takes from it only what lowers trust or budget (and the
// advisory signals). Absent members are nil or unspecified, so "not said"
// differs from "said zero".
type AgentHeader struct {
	// Trust is the level the agent declared, unspecified when it declared
	// none.
	Trust   nmpv1.TrustLevel
	Signals AgentSignals
	Budget  AgentBudget
	Trace   []AgentTraceEntry
}

// AgentSignals are the signals the agent gave, each nil when absent. Values
// were range-checked when parsed.
type AgentSignals struct {
	Urgency, Quality, Inhibition, Activation, Focus, Reward *Milli
}

func (s *AgentSignals) slot(sig Signal) **Milli {
	switch sig {
	case Urgency:
		return &s.Urgency
	case Quality:
		return &s.Quality
	case Inhibition:
		return &s.Inhibition
	case Activation:
		return &s.Activation
	case Focus:
		return &s.Focus
	case Reward:
		return &s.Reward
	}
	return nil
}

// Get returns signal sig and whether the agent gave it.
func (s AgentSignals) Get(sig Signal) (Milli, bool) {
	p := s.slot(sig)
	if p == nil || *p == nil {
		return 0, false
	}
	return **p, true
}

// AgentBudget is the budget the agent gave; nil or unspecified when absent.
type AgentBudget struct {
	MaxTokens  *uint64
	TokensUsed *uint64
	SystemMode nmpv1.SystemMode
}

// AgentTraceEntry is one hop the agent reports, in the README's form.
type AgentTraceEntry struct {
	Agent  string
	Action string
	Tokens uint64
}

// TrustCap returns the trust the agent declared and a reason, for
// envelope.Hop.LowerTrust at ingress: lowering there records the reason in
// the ingress trace entry. Unspecified (nothing to lower) when the agent
// declared none.
func (a *AgentHeader) TrustCap() (nmpv1.TrustLevel, string) {
	if a == nil || a.Trust == nmpv1.TrustLevel_TRUST_LEVEL_UNSPECIFIED {
		return nmpv1.TrustLevel_TRUST_LEVEL_UNSPECIFIED, ""
	}
	return a.Trust, "the agent's NMP header declares trust " + TrustName(a.Trust)
}

// MarshalJSON renders the header in the README's nmp_message form with only
// the members the agent gave, so that ParseAgentHeader of the output yields
// an equal AgentHeader. Signals print as exact decimals from Milli.
func (a *AgentHeader) MarshalJSON() ([]byte, error) {
	var w objWriter
	w.open("")
	w.open("nmp_message")
	if a.Trust != nmpv1.TrustLevel_TRUST_LEVEL_UNSPECIFIED {
		w.open("trust")
		w.raw("level", strconv.Itoa(TrustToNMP(a.Trust)))
		w.close()
	}
	if a.hasSignals() {
		w.open("signals")
		for _, s := range AllSignals() {
			if v, ok := a.Signals.Get(s); ok {
				w.raw(s.String(), v.String())
			}
		}
		w.close()
	}
	b := a.Budget
	if b.MaxTokens != nil || b.TokensUsed != nil || b.SystemMode != nmpv1.SystemMode_SYSTEM_MODE_UNSPECIFIED {
		w.open("budget")
		if b.MaxTokens != nil {
			w.raw("max_tokens", strconv.FormatUint(*b.MaxTokens, 10))
		}
		if b.TokensUsed != nil {
			w.raw("tokens_used", strconv.FormatUint(*b.TokensUsed, 10))
		}
		if name := ModeName(b.SystemMode); name != "" {
			w.str("system_mode", name)
		}
		w.close()
	}
	if len(a.Trace) > 0 {
		w.openArray("trace")
		for _, e := range a.Trace {
			w.open("")
			w.str("agent", e.Agent)
			w.str("action", e.Action)
			w.raw("tokens", strconv.FormatUint(e.Tokens, 10))
			w.close()
		}
		w.closeArray()
	}
	w.close()
	w.close()
	return w.buf.Bytes(), nil
}

func (a *AgentHeader) hasSignals() bool {
	for _, s := range AllSignals() {
		if _, ok := a.Signals.Get(s); ok {
			return true
		}
	}
	return false
}

// objWriter writes compact JSON with members in the order given, which
// encoding/json's maps would not keep; numbers are written from exact
// decimal text, never from floats.
type objWriter struct {
	buf   bytes.Buffer
	first []bool // per open container: no member written yet
}

func (w *objWriter) key(k string) {
	if n := len(w.first); n > 0 {
		if !w.first[n-1] {
			w.buf.WriteByte(',')
		}
		w.first[n-1] = false
	}
	if k != "" {
		w.buf.Write(quote(k))
		w.buf.WriteByte(':')
	}
}

func (w *objWriter) open(k string) {
	w.key(k)
	w.buf.WriteByte('{')
	w.first = append(w.first, true)
}

func (w *objWriter) openArray(k string) {
	w.key(k)
	w.buf.WriteByte('[')
	w.first = append(w.first, true)
}

func (w *objWriter) close() {
	w.buf.WriteByte('}')
	w.first = w.first[:len(w.first)-1]
}

func (w *objWriter) closeArray() {
	w.buf.WriteByte(']')
	w.first = w.first[:len(w.first)-1]
}

func (w *objWriter) raw(k, v string) {
	w.key(k)
	w.buf.WriteString(v)
}

func (w *objWriter) str(k, v string) {
	w.key(k)
	w.buf.Write(quote(v))
}

// quote is a JSON string. json.Marshal of a string cannot fail; invalid
// UTF-8 becomes U+FFFD.
func quote(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}
