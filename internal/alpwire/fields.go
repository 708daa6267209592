package alpwire

import (
	"encoding/base64"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/msgtypes"
)

// MaxStringLen bounds any string member of a wire object outside an
// envelope's body and the fields with limits of their own.
const MaxStringLen = 1024

// fields reads the members of one object in the order the caller asks for
// them and remembers the first problem, so a decoder is a flat list of
// reads followed by done(). Members never read are unknown.
type fields struct {
	n    *node
	ptr  string
	used map[string]bool
	err  *Error
}

func readFields(n *node, ptr string) *fields {
	return &fields{n: n, ptr: ptr, used: make(map[string]bool, len(n.members))}
}

func (f *fields) fail(code, ptr, msg string) {
	if f.err == nil {
		f.err = newErr(code, ptr, msg)
	}
}

// take returns the member key if it exists with kind k; required says
// whether its absence is an error.
func (f *fields) take(key string, k kind, required bool) (*node, string) {
	p := child(f.ptr, key)
	f.used[key] = true
	v := f.n.get(key)
	if v == nil {
		if required {
			f.fail(CodeMissingField, p, "the member "+strconv.Quote(key)+" is required")
		}
		return nil, p
	}
	if v.kind != k {
		f.fail(CodeWrongType, p, "is "+v.kind.String()+", want "+k.String())
		return nil, p
	}
	return v, p
}

// str reads a string member (absent: ""); a present optional member must
// not be empty, so there is one way to say "none".
func (f *fields) str(key string, required bool, max int) (string, string) {
	v, p := f.take(key, kindString, required)
	if v == nil {
		return "", p
	}
	if v.str == "" {
		f.fail(CodeInvalidValue, p, "is empty (leave an optional member out instead)")
	}
	if max <= 0 {
		max = MaxStringLen
	}
	if len(v.str) > max {
		f.fail(CodeTooLarge, p, "is longer than "+strconv.Itoa(max)+" bytes")
	}
	return v.str, p
}

// ts reads a required millisecond timestamp (a non-negative integer).
func (f *fields) ts(key string) int64 { return f.size(key) }

// size reads a required non-negative integer.
func (f *fields) size(key string) int64 {
	v, p := f.take(key, kindNumber, true)
	if v == nil {
		return 0
	}
	if v.num < 0 {
		f.fail(CodeOutOfRange, p, "is negative")
	}
	return v.num
}

func (f *fields) boolean(key string) bool {
	v, _ := f.take(key, kindBool, true)
	return v != nil && v.boolean
}

func (f *fields) object(key string, required bool) *node {
	v, _ := f.take(key, kindObject, required)
	return v
}

// strings reads an optional array of non-empty strings.
func (f *fields) strings(key string, max int) []string {
	v, p := f.take(key, kindArray, false)
	if v == nil {
		return nil
	}
	out := make([]string, 0, len(v.elems))
	for i, e := range v.elems {
		ep := index(p, i)
		if e.kind != kindString {
			f.fail(CodeWrongType, ep, "is "+e.kind.String()+", want a string")
			continue
		}
		if e.str == "" || len(e.str) > max {
			f.fail(CodeInvalidValue, ep, "is empty or longer than "+strconv.Itoa(max)+" bytes")
		}
		out = append(out, e.str)
	}
	return out
}

// version checks the "wire" member.
func (f *fields) version() {
	v, p := f.str("wire", true, 0)
	if f.err == nil && v != Version {
		f.fail(CodeWrongVersion, p, strconv.Quote(v)+" is not "+Version)
	}
}

// done reports the first problem, or the first member nobody read. Members
// are visited in input order, so the answer is stable.
func (f *fields) done() *Error {
	if f.err != nil {
		return f.err
	}
	for _, m := range f.n.members {
		if !f.used[m.key] {
			return newErr(CodeUnknownField, child(f.ptr, m.key), "the member "+strconv.Quote(m.key)+" is not part of "+Version)
		}
	}
	return nil
}

// checks of member values; each records at most one problem.

func (f *fields) uuid(v, p string) {
	if v == "" || f.err != nil {
		return
	}
	u, err := uuid.Parse(v)
	if err != nil || u.String() != v {
		f.fail(CodeInvalidValue, p, strconv.Quote(v)+" is not a UUID in canonical (lowercase, hyphenated) form")
	}
}

// dnsName checks a domain or broker name: a DNS name in canonical form (the
// tenant rule of internal/alp).
func (f *fields) dnsName(v, p string) {
	if v == "" || f.err != nil {
		return
	}
	if err := alp.ValidateTenant(v); err != nil {
		f.fail(CodeInvalidValue, p, err.Error())
	}
}

func (f *fields) address(v, p string) {
	if v == "" || f.err != nil {
		return
	}
	if a, err := alp.ParseAddress(v); err != nil || a.String() != v {
		msg := strconv.Quote(v) + " is not an address in canonical (lowercase) form"
		if err != nil {
			msg = err.Error()
		}
		f.fail(CodeInvalidValue, p, msg)
	}
}

func (f *fields) oneOf(v, p string, allowed ...string) {
	if v == "" || f.err != nil {
		return
	}
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	f.fail(CodeInvalidValue, p, strconv.Quote(v)+" is not one of "+strings.Join(allowed, ", "))
}

// b64 checks that v is unpadded base64url of exactly n bytes.
func (f *fields) b64(v, p string, n int) []byte {
	if v == "" || f.err != nil {
		return nil
	}
	b, problem := decodeB64(v, n)
	if problem != "" {
		f.fail(CodeBadBase64, p, problem)
	}
	return b
}

// b64url is the encoding of every key, signature, digest and nonce.
var b64url = base64.RawURLEncoding.Strict()

// decodeB64 returns the bytes, or what is wrong with s.
func decodeB64(s string, n int) ([]byte, string) {
	b, err := b64url.DecodeString(s)
	if err != nil {
		return nil, "not unpadded base64url: " + err.Error()
	}
	if len(b) != n {
		return nil, "decodes to " + strconv.Itoa(len(b)) + " bytes, want " + strconv.Itoa(n)
	}
	return b, ""
}

func (f *fields) typeName(v, p string) {
	if v == "" || f.err != nil {
		return
	}
	if err := msgtypes.ValidateName(v); err != nil {
		f.fail(CodeInvalidValue, p, err.Error())
	}
}

func (f *fields) ledgerOrigin(v, p string) {
	if v == "" || f.err != nil {
		return
	}
	if _, _, err := ledgerlog.ParseOrigin(v); err != nil {
		f.fail(CodeInvalidValue, p, err.Error())
	}
}

func (f *fields) commitment(v, p string) {
	if v == "" || f.err != nil {
		return
	}
	if err := ledgerlog.CheckCommitment(v); err != nil {
		f.fail(CodeInvalidValue, p, err.Error())
	}
}
