package ledgerlog

import (
	"strconv"
)

// A direct RFC 8785 encoder for the ledger's own structures. Leaves are
// hashed by every verifier for every entry, so going through
// encoding/json and a generic canonicalizer (three passes, a parse tree)
// would dominate verification time. The structures hold only strings,
// integers below 2^53 and arrays of those, with ASCII keys, so RFC 8785
// reduces to: keys in byte order, integers in decimal, strings escaped as
// ECMAScript's JSON.stringify does. Tests check this encoder against
// github.com/gowebpki/jcs on many entries (canonical_test.go).

type canonWriter struct{ b []byte }

// str writes a JSON string as RFC 8785 §3.2.2.2 requires: only '"', '\\'
// and control characters are escaped, the latter with the short forms
// where JSON has them and \u00xx (lowercase hex) otherwise. The caller
// guarantees valid UTF-8 (validation refuses anything else).
func (w *canonWriter) str(s string) {
	const hex = "0123456789abcdef"
	w.b = append(w.b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		w.b = append(w.b, s[start:i]...)
		switch c {
		case '"', '\\':
			w.b = append(w.b, '\\', c)
		case '\b':
			w.b = append(w.b, '\\', 'b')
		case '\t':
			w.b = append(w.b, '\\', 't')
		case '\n':
			w.b = append(w.b, '\\', 'n')
		case '\f':
			w.b = append(w.b, '\\', 'f')
		case '\r':
			w.b = append(w.b, '\\', 'r')
		default:
			w.b = append(w.b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	w.b = append(w.b, s[start:]...)
	w.b = append(w.b, '"')
}

// Objects are written member by member, in RFC 8785 order as listed by the
// caller; open/close bracket them and the helpers skip empty optional
// members. No closures or maps: this runs once per leaf.

func (w *canonWriter) open() { w.b = append(w.b, '{') }

func (w *canonWriter) close() { w.b = append(w.b, '}') }

func (w *canonWriter) key(k string) {
	if n := len(w.b); n > 0 && w.b[n-1] != '{' && w.b[n-1] != '[' {
		w.b = append(w.b, ',')
	}
	w.str(k)
	w.b = append(w.b, ':')
}

func (w *canonWriter) strMember(k, v string) {
	w.key(k)
	w.str(v)
}

func (w *canonWriter) optMember(k, v string) {
	if v != "" {
		w.strMember(k, v)
	}
}

func (w *canonWriter) uintMember(k string, u uint64) {
	w.key(k)
	w.b = strconv.AppendUint(w.b, u, 10)
}

func (w *canonWriter) elem() {
	if n := len(w.b); w.b[n-1] != '[' {
		w.b = append(w.b, ',')
	}
}

func (e *Entry) appendCanonical(b []byte) []byte {
	w := canonWriter{b: b}
	w.open()
	w.optMember("action", e.Action)
	w.optMember("agent", e.Agent)
	w.optMember("binding_code", e.BindingCode)
	w.optMember("broker", e.Broker)
	w.optMember("checkpoint", e.Checkpoint)
	w.optMember("code", e.Code)
	w.optMember("commitment", e.Commitment)
	w.optMember("cosignature", e.Cosignature)
	w.optMember("counterparty", e.Counterparty)
	// Required on every kind but checkpoint.cosigned, which has none.
	w.optMember("envelope_id", e.EnvelopeID)
	w.optMember("expires", e.Expires)
	if len(e.Fields) > 0 {
		w.key("fields")
		w.b = append(w.b, '[')
		for i := range e.Fields {
			f := &e.Fields[i]
			w.elem()
			w.open()
			w.strMember("action", f.Action)
			w.optMember("class", f.Class)
			w.strMember("pointer", f.Pointer)
			w.reasons("reasons", f.Reasons)
			w.close()
		}
		w.b = append(w.b, ']')
	}
	if len(e.Held) > 0 {
		w.key("held")
		w.b = append(w.b, '[')
		for i := range e.Held {
			h := &e.Held[i]
			w.elem()
			w.open()
			w.optMember("commits", h.Commits)
			w.strMember("id", h.ID)
			w.strMember("kind", h.Kind)
			w.strings("pointers", h.Pointers)
			w.close()
		}
		w.b = append(w.b, ']')
	}
	w.strings("held_ids", e.HeldIDs)
	w.optMember("held_kind", e.HeldKind)
	w.uintMember("i", e.Index)
	w.optMember("item", e.Item)
	w.strMember("kind", e.Kind)
	w.strMember("log", e.Log)
	w.optMember("origin_signature", e.OriginSignature)
	w.optMember("outcome", e.Outcome)
	w.optMember("payload_digest", e.PayloadDigest)
	w.reasons("reasons", e.Reasons)
	if e.Receipt != nil {
		w.key("receipt")
		w.b = e.Receipt.appendCanonical(w.b, true)
	}
	w.optMember("rule", e.Rule)
	w.strings("rule_versions", e.RuleVersions)
	w.strMember("source_event", e.SourceEvent)
	w.optMember("state", e.State)
	w.optMember("trust_class", e.TrustClass)
	w.strMember("ts", e.Time)
	w.optMember("type", e.Type)
	w.uintMember("v", uint64(e.V))
	if len(e.Views) > 0 {
		w.key("views")
		w.b = append(w.b, '[')
		for i := range e.Views {
			v := &e.Views[i]
			w.elem()
			w.open()
			w.strings("pointers", v.Pointers)
			w.strMember("trust_class", v.TrustClass)
			w.close()
		}
		w.b = append(w.b, ']')
	}
	w.optMember("wire_sha256", e.WireDigest)
	w.strings("withheld", e.Withheld)
	w.close()
	return w.b
}

// strings writes a member holding an array of strings, skipped when empty.
func (w *canonWriter) strings(k string, vs []string) {
	if len(vs) == 0 {
		return
	}
	w.key(k)
	w.b = append(w.b, '[')
	for _, v := range vs {
		w.elem()
		w.str(v)
	}
	w.b = append(w.b, ']')
}

// reasons writes a member holding reasons, skipped when empty.
func (w *canonWriter) reasons(k string, rs []Reason) {
	if len(rs) == 0 {
		return
	}
	w.key(k)
	w.b = append(w.b, '[')
	for i := range rs {
		r := &rs[i]
		w.elem()
		w.open()
		w.optMember("code", r.Code)
		w.strMember("party", r.Party)
		w.optMember("pointer", r.Pointer)
		w.optMember("policy", r.Policy)
		w.close()
	}
	w.b = append(w.b, ']')
}

// appendCanonical writes the receipt, with its signature if withSig (and
// the signature is set).
func (r *Receipt) appendCanonical(b []byte, withSig bool) []byte {
	w := canonWriter{b: b}
	w.open()
	w.strMember("checkpoint", r.Checkpoint)
	w.strMember("commitment", r.Commitment)
	w.optMember("counterparty", r.Counterparty)
	w.strMember("envelope_id", r.EnvelopeID)
	w.uintMember("i", r.Index)
	w.strMember("key_id", r.KeyID)
	w.strMember("leaf_hash", r.LeafHash)
	w.strMember("log", r.Log)
	w.strings("proof", r.Proof)
	if withSig {
		w.optMember("sig", r.Signature)
	}
	w.strMember("t", r.Type)
	w.close()
	return w.b
}
