package dlp

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"regexp"
	"strings"
	"unicode/utf8"
)

// pattern is a detector with a regular expression (RE2: linear time, so no
// input can make a scan slow). Group 1 of re is the span reported. hints are
// lowercase substrings one of which must occur in the lowered text for the
// expression to run at all, which keeps the scan of ordinary prose cheap.
// before and after are the characters that may not touch the span (RE2 has
// no lookaround, and consuming the boundary would hide a second match right
// after the first). valid, when set, is the check the shape cannot make.
//
// Go's regexp has no DFA: an expression that starts with a literal is fast
// (it jumps to each occurrence), one that starts with a class tries every
// position. So case-insensitive keys run on the ASCII-lowered copy with a
// lowercase literal (onLower; offsets are the same and the value classes
// are case-blind), and the rest name candidate start positions (at) where
// an anchored expression is tried.
type pattern struct {
	det           Detector
	hints         []string
	re            *regexp.Regexp
	onLower       bool
	at            func(t string, i int) bool
	window        int // longest match from a candidate start, bounding the anchored try
	before, after glue
	valid         func(v string) bool
	anchored      *regexp.Regexp // re with ^, built from re for the at loop
}

// glue is a set of ASCII characters: word says letters, digits and '_',
// extra adds more.
type glue struct {
	word  bool
	extra string
}

func (g glue) has(c byte) bool {
	return (g.word && (isAlnum(c) || c == '_')) || strings.IndexByte(g.extra, c) >= 0
}

var (
	word     = glue{word: true}
	base64ch = glue{word: true, extra: "+/="}
	urlsafe  = glue{word: true, extra: "-"}
)

const number = `[0-9]+(?:[.,'][0-9]+)*`
const symbols = `[$€£¥₹₩₽₺₪₫₴₦₱฿₣₡]`

// patternTable holds every expression-based detector; it is built once and
// only read.
var patternTable = anchor([]pattern{
	{det: PEMPrivateKey, hints: []string{"-----begin"},
		re: regexp.MustCompile(`(-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----)`)},
	{det: JWT, hints: []string{"eyj"}, before: urlsafe, after: urlsafe,
		re:    regexp.MustCompile(`(eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*)`),
		valid: validJWT},
	{det: AWSAccessKeyID, hints: []string{"akia", "asia"}, before: word, after: word,
		re: regexp.MustCompile(`((?:AKIA|ASIA)[A-Z0-9]{16})`)},
	{det: AWSSecretAccessKey, hints: []string{"aws"}, after: base64ch, onLower: true,
		re: regexp.MustCompile(`aws_?secret_?(?:access_?)?key["']?\s*[:=]\s*["']?([a-z0-9/+]{40})`)},
	{det: GCPAPIKey, hints: []string{"aiza"}, before: urlsafe, after: urlsafe,
		re: regexp.MustCompile(`(AIza[0-9A-Za-z_-]{35})`)},
	{det: AzureStorageKey, hints: []string{"accountkey="}, before: word, after: base64ch, onLower: true,
		re: regexp.MustCompile(`(accountkey=[a-z0-9+/]{86}==)`)},
	{det: AzureStorageKey, hints: []string{"sharedaccesskey="}, before: word, after: base64ch, onLower: true,
		re: regexp.MustCompile(`(sharedaccesskey=[a-z0-9+/]{43}=)`)},
	{det: GitHubToken, hints: []string{"gh", "github_pat_"}, before: word, after: word,
		re: regexp.MustCompile(`((?:gh[pousr]_[A-Za-z0-9]{36})|(?:github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}))`)},
	{det: SlackToken, hints: []string{"xox", "xapp-"}, before: word,
		re: regexp.MustCompile(`((?:xox[abpors]|xapp)-[0-9A-Za-z]+-[0-9A-Za-z-]{10,})`)},
	{det: SlackWebhook, hints: []string{"hooks.slack.com"},
		re: regexp.MustCompile(`(https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_-]{8,}/[A-Za-z0-9_-]{8,}/[A-Za-z0-9_/-]{16,})`)},
	{det: StripeSecretKey, hints: []string{"sk_live_"}, before: word, after: word,
		re: regexp.MustCompile(`(sk_live_[0-9A-Za-z]{24,})`)},
	{det: StripeSecretKey, hints: []string{"rk_live_"}, before: word, after: word,
		re: regexp.MustCompile(`(rk_live_[0-9A-Za-z]{24,})`)},
	{det: Phone, hints: []string{"+"}, before: glue{word: true, extra: "+"}, after: word,
		re:    regexp.MustCompile(`(\+[1-9][0-9 ().-]{5,20}[0-9])`),
		valid: validE164},
	{det: Phone, before: glue{word: true, extra: "+(-"}, after: glue{word: true, extra: "-"}, at: nanpStart, window: 16,
		re: regexp.MustCompile(`((?:\([2-9][0-9]{2}\) ?|[2-9][0-9]{2}[-. ])[2-9][0-9]{2}[-. ][0-9]{4})`)},
	{det: Amount, hints: []string{"$", "€", "£", "¥", "₹", "₩", "₽", "₺", "₪", "₫", "₴", "₦", "₱", "฿", "₣", "₡"},
		after: word, // "US$5" and "C$5" are amounts too, so nothing glues before
		at:    symbolOrNumberStart, window: 48,
		re: regexp.MustCompile(`((?:` + symbols + ` ?` + number + `)|(?:` + number + ` ?` + symbols + `))`)},
})

// anchor builds each pattern's anchored form for the candidate loop.
func anchor(ps []pattern) []pattern {
	for i := range ps {
		if ps[i].at != nil {
			ps[i].anchored = regexp.MustCompile(`^(?:` + ps[i].re.String() + `)`)
		}
	}
	return ps
}

func (s *scanner) runPatterns() {
	t := s.text
	for i := range patternTable {
		p := &patternTable[i]
		if len(p.hints) > 0 && !containsAny(s.lower, p.hints) {
			continue
		}
		in := t
		if p.onLower {
			in = s.lower
		}
		if p.at == nil {
			for _, m := range p.re.FindAllStringSubmatchIndex(in, -1) {
				s.match(p, m[2], m[3])
			}
			continue
		}
		for i := 0; i < len(in); i++ {
			if !p.at(in, i) {
				continue
			}
			// The backtracker's cost grows with its input, so each try sees
			// only as much text as a match can span.
			w := in[i:min(len(in), i+p.window)]
			if m := p.anchored.FindStringSubmatchIndex(w); m != nil && s.match(p, i+m[2], i+m[3]) {
				i += m[1] - 1
			}
		}
	}
}

// match records a match of p at [start, end) if its neighbours and its
// check allow it.
func (s *scanner) match(p *pattern, start, end int) bool {
	t := s.text
	if (start > 0 && p.before.has(t[start-1])) || (end < len(t) && p.after.has(t[end])) {
		return false
	}
	if p.valid != nil && !p.valid(t[start:end]) {
		return false
	}
	if p.det == PEMPrivateKey {
		end = s.pemEnd(end)
	}
	s.add(p.det, start, end)
	return true
}

// The candidate starts for anchored patterns.

func nanpStart(t string, i int) bool {
	return t[i] == '(' || (t[i] >= '2' && t[i] <= '9' && (i == 0 || !isDigit(t[i-1])))
}

func numberStart(t string, i int) bool {
	return isDigit(t[i]) && (i == 0 || !isDigit(t[i-1]))
}

func symbolOrNumberStart(t string, i int) bool {
	return numberStart(t, i) || t[i] == '$' || (t[i] >= 0x80 && utf8.RuneStart(t[i]))
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// pemEnd extends a private key's span from its BEGIN line to the end of its
// END line, or to the end of the text when the key was cut off: everything
// after the header is key material.
func (s *scanner) pemEnd(from int) int {
	const endMark = "PRIVATE KEY-----"
	t := s.text
	if s.noPEMEnd > 0 && from >= s.noPEMEnd {
		return len(t) // known: no END line after here (keeps many headers linear)
	}
	i := strings.Index(t[from:], "-----END ")
	j := -1
	if i >= 0 {
		j = strings.Index(t[from+i:], endMark)
	}
	if j < 0 {
		s.noPEMEnd = from
		return len(t)
	}
	return from + i + j + len(endMark)
}

// validJWT requires a header that decodes (base64url, padding optional) to
// a JSON object with a string "alg", and a payload that decodes too: a
// dotted identifier that merely starts with "eyJ" is not a token.
func validJWT(v string) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) != 3 {
		return false
	}
	dec := func(p string) ([]byte, bool) {
		b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(p, "="))
		return b, err == nil
	}
	h, ok := dec(parts[0])
	if !ok {
		return false
	}
	if _, ok := dec(parts[1]); !ok {
		return false
	}
	var hdr map[string]any
	if json.Unmarshal(h, &hdr) != nil {
		return false
	}
	alg, ok := hdr["alg"].(string)
	return ok && alg != ""
}

func isKeyChar(c byte) bool { return isAlnum(c) || c == '_' || c == '.' || c == '-' }

// secretKeys are the key-name parts after which a high-entropy value is a
// secret; "apikey" and "api-key" are covered by "key" forms below.
var secretKeys = []string{"password", "passwd", "pwd", "secret", "token", "apikey", "api_key", "api-key",
	"access_key", "access-key", "accesskey", "private_key", "private-key", "privatekey",
	"auth_key", "auth-key", "authkey", "credential"}

// highEntropyKV finds key=value and key: value pairs (quotes allowed around
// either) whose key contains a secretKeys part and whose value, 20 or more
// characters up to whitespace, a quote, ',' or ';', passes highEntropy. It
// is a hand scan from each '=' and ':' because an expression starting with
// the key's character class would be tried at every position.
func (s *scanner) highEntropyKV() {
	if !containsAny(s.lower, []string{"pass", "pwd", "secret", "token", "key", "credential"}) {
		return
	}
	t, lo := s.text, s.lower
	for i := 0; i < len(t); i++ {
		if t[i] != '=' && t[i] != ':' {
			continue
		}
		// Key: back over spaces and one closing quote, then key characters.
		k := i
		for k > 0 && t[k-1] == ' ' {
			k--
		}
		if k > 0 && (t[k-1] == '"' || t[k-1] == '\'') {
			k--
		}
		ke := k
		for k > 0 && ke-k < maxKeyLen && isKeyChar(t[k-1]) {
			k--
		}
		if k == ke || !containsAny(lo[k:ke], secretKeys) {
			continue
		}
		// Value: forward over spaces and one opening quote.
		v := i + 1
		for v < len(t) && t[v] == ' ' {
			v++
		}
		if v < len(t) && (t[v] == '"' || t[v] == '\'') {
			v++
		}
		ve := v
		for ve < len(t) && ve-v < maxValueLen && !isValueEnd(t[ve]) {
			ve++
		}
		if ve-v >= 20 && highEntropy(t[v:ve]) {
			s.add(HighEntropySecret, v, ve)
			i = ve - 1
		}
	}
}

// maxKeyLen and maxValueLen bound the walks from each '=' so that text made
// of many of them costs linear time; a longer key is cut to its last 64
// characters, a longer value is judged by its first 256.
const (
	maxKeyLen   = 64
	maxValueLen = 256
)

func isValueEnd(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '"' || c == '\'' || c == '`' || c == ',' || c == ';'
}

var emailRe = regexp.MustCompile(`^[A-Za-z0-9._%+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,}`)

func isLocalChar(c byte) bool { return isAlnum(c) || strings.IndexByte("._%+-", c) >= 0 }

// emails starts at each '@', walks back over local-part characters and
// tries the address expression there, on at most 254 characters (the
// longest address SMTP allows).
func (s *scanner) emails() {
	t := s.text
	for at := strings.IndexByte(t, '@'); at >= 0; {
		start := at
		for start > 0 && isLocalChar(t[start-1]) {
			start--
		}
		next := at + 1
		if start < at {
			if end := len(emailRe.FindString(t[start:min(len(t), start+254)])); end > 0 && (start+end == len(t) || !isAlnum(t[start+end]) && t[start+end] != '_') {
				s.add(Email, start, start+end)
				next = start + end
			}
		}
		i := strings.IndexByte(t[next:], '@')
		if i < 0 {
			break
		}
		at = next + i
	}
}

// EntropyThreshold is the Shannon entropy, in bits per character, that a
// value of 20 or more characters after a secret-sounding key must reach to
// count as a secret. Measured on 2,000 random values each: 20 base62
// characters score 3.4–4.3, 20 hex characters 2.5–3.9 (mean 3.4), 32 hex
// about 3.55. Typed passwords of that length score 3.0–4.0
// ("Summer2024Summer2024!" 3.06) while repeated placeholders stay under it
// ("xxxxxxxxxxxxxxxxxxxx" 0, "changeme-changeme-changeme" 2.93). The key
// already says "secret", so the threshold is set to let through only what is
// clearly not one; docs/policy.md lists what that misses and what it takes.
const EntropyThreshold = 3.0

// highEntropy takes values that look like generated secrets and refuses
// references and placeholders ($VAR, ${VAR}, {{var}}, <your-token>).
func highEntropy(v string) bool {
	if strings.HasPrefix(v, "$") || strings.HasPrefix(v, "{{") || strings.HasPrefix(v, "<") {
		return false
	}
	return shannon(v) >= EntropyThreshold
}

func shannon(v string) float64 {
	var counts [256]int
	for i := 0; i < len(v); i++ {
		counts[v[i]]++
	}
	n := float64(len(v))
	h := 0.0
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			h -= p * math.Log2(p)
		}
	}
	return h
}

// validE164 counts 8–15 digits (E.164 allows at most 15; fewer than 8 is
// too short to be a full international number), with no two separators in a
// row and balanced parentheses.
func validE164(v string) bool {
	digits, seps, open := 0, 0, 0
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case isDigit(c):
			digits++
			seps = 0
		case c == '(':
			open++
		case c == ')':
			if open--; open < 0 {
				return false
			}
		default:
			if seps++; seps > 1 {
				return false
			}
		}
	}
	return open == 0 && digits >= 8 && digits <= 15
}

// numberLen is the length of the number (digits, groups joined by '.', ','
// or an apostrophe) at the start of t, or 0.
func numberLen(t string) int {
	i := 0
	for {
		j := i
		for j < len(t) && isDigit(t[j]) {
			j++
		}
		if j == i {
			if i == 0 {
				return 0
			}
			return i - 1 // drop the trailing separator
		}
		if j < len(t) && (t[j] == '.' || t[j] == ',' || t[j] == '\'') {
			i = j + 1
			continue
		}
		return j
	}
}

func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }

// code3 reports whether t[i:i+3] is an ISO 4217 code standing alone as a
// word.
func code3(t string, i int) bool {
	if i < 0 || i+3 > len(t) || !isUpper(t[i]) || !isUpper(t[i+1]) || !isUpper(t[i+2]) {
		return false
	}
	if (i > 0 && (isAlnum(t[i-1]) || t[i-1] == '_')) || (i+3 < len(t) && (isAlnum(t[i+3]) || t[i+3] == '_')) {
		return false
	}
	return currencies[t[i:i+3]]
}

// amountCodes finds "USD 1,200.50" and "1200 EUR": an ISO 4217 code, one
// optional space, a number not glued to a word — by hand, since an
// expression starting with a class is tried at every position.
func (s *scanner) amountCodes() {
	t := s.text
	for i := 0; i < len(t); i++ {
		if !isDigit(t[i]) || (i > 0 && (isAlnum(t[i-1]) && !isUpper(t[i-1]) || isDigit(t[i-1]) || t[i-1] == '_')) {
			continue
		}
		n := numberLen(t[i:])
		end := i + n
		switch {
		case code3(t, i-3) && (end == len(t) || !isAlnum(t[end]) && t[end] != '_'):
			s.add(Amount, i-3, end)
		case i >= 4 && t[i-1] == ' ' && code3(t, i-4) && (end == len(t) || !isAlnum(t[end]) && t[end] != '_'):
			s.add(Amount, i-4, end)
		case code3(t, end):
			s.add(Amount, i, end+3)
		case end+1 < len(t) && t[end] == ' ' && code3(t, end+1):
			s.add(Amount, i, end+4)
		}
		i = end
	}
}

// currencies are the ISO 4217 active codes, including funds and precious
// metals, less XTS (testing) and XXX (no currency).
var currencies = func() map[string]bool {
	const codes = `AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BOV
BRL BSD BTN BWP BYN BZD CAD CDF CHE CHF CHW CLF CLP CNY COP COU CRC CUC CUP CVE CZK DJF DKK DOP DZD
EGP ERN ETB EUR FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD
JOD JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP MRU
MUR MVR MWK MXN MXV MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB
RWF SAR SBD SCR SDG SEK SGD SHP SLE SLL SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD
TZS UAH UGX USD USN UYI UYU UYW UZS VED VES VND VUV WST XAF XAG XAU XBA XBB XBC XBD XCD XCG XDR XOF
XPD XPF XPT XSU XUA YER ZAR ZMW ZWG ZWL`
	m := map[string]bool{}
	for _, c := range strings.Fields(codes) {
		m[c] = true
	}
	return m
}()
