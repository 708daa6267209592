package dlp

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"regexp"
	"strings"
)

// pattern is a detector with a regular expression (RE2: linear time, so no
// input can make a scan slow). Group 1 of re is the span reported. hints are
// lowercase substrings one of which must occur in the lowered text for the
// expression to run at all, which keeps the scan of ordinary prose cheap.
// before and after are the characters that may not touch the span (RE2 has
// no lookaround, and consuming the boundary would hide a second match right
// after the first). valid, when set, is the check the shape cannot make.
type pattern struct {
	det           Detector
	hints         []string
	re            *regexp.Regexp
	before, after glue
	valid         func(v string) bool
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
var patternTable = []pattern{
	{det: PEMPrivateKey, hints: []string{"-----begin"},
		re: regexp.MustCompile(`(-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----)`)},
	{det: JWT, hints: []string{"eyj"}, before: urlsafe, after: urlsafe,
		re:    regexp.MustCompile(`(eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*)`),
		valid: validJWT},
	{det: AWSAccessKeyID, hints: []string{"akia", "asia"}, before: word, after: word,
		re: regexp.MustCompile(`((?:AKIA|ASIA)[A-Z0-9]{16})`)},
	{det: AWSSecretAccessKey, hints: []string{"aws"}, after: base64ch,
		re: regexp.MustCompile(`(?i)aws_?secret_?(?:access_?)?key["']?\s*[:=]\s*["']?([A-Za-z0-9/+]{40})`)},
	{det: GCPAPIKey, hints: []string{"aiza"}, before: urlsafe, after: urlsafe,
		re: regexp.MustCompile(`(AIza[0-9A-Za-z_-]{35})`)},
	{det: AzureStorageKey, hints: []string{"accountkey=", "sharedaccesskey="}, before: word, after: base64ch,
		re: regexp.MustCompile(`(?i)((?:AccountKey=[A-Za-z0-9+/]{86}==)|(?:SharedAccessKey=[A-Za-z0-9+/]{43}=))`)},
	{det: GitHubToken, hints: []string{"gh", "github_pat_"}, before: word, after: word,
		re: regexp.MustCompile(`((?:gh[pousr]_[A-Za-z0-9]{36})|(?:github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}))`)},
	{det: SlackToken, hints: []string{"xox", "xapp-"}, before: word,
		re: regexp.MustCompile(`((?:xox[abpors]|xapp)-[0-9A-Za-z]+-[0-9A-Za-z-]{10,})`)},
	{det: SlackWebhook, hints: []string{"hooks.slack.com"},
		re: regexp.MustCompile(`(https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_-]{8,}/[A-Za-z0-9_-]{8,}/[A-Za-z0-9_/-]{16,})`)},
	{det: StripeSecretKey, hints: []string{"_live_"}, before: word, after: word,
		re: regexp.MustCompile(`((?:sk|rk)_live_[0-9A-Za-z]{24,})`)},
	{det: HighEntropySecret, hints: []string{"pass", "pwd", "secret", "token", "key", "auth", "credential"},
		re:    regexp.MustCompile(`(?i)\b[a-z0-9_.-]*(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|auth[_-]?key|credentials?)[a-z0-9_.-]*["']?\s*[:=]\s*["']?([^\s"'` + "`" + `,;]{20,})`),
		valid: highEntropy},
	{det: Email, hints: []string{"@"}, before: glue{word: true, extra: ".%+-"}, after: word,
		re: regexp.MustCompile(`([A-Za-z0-9._%+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,})`)},
	{det: Phone, hints: []string{"+"}, before: glue{word: true, extra: "+"}, after: word,
		re:    regexp.MustCompile(`(\+[1-9][0-9 ().-]{5,20}[0-9])`),
		valid: validE164},
	{det: Phone, before: glue{word: true, extra: "+(-"}, after: glue{word: true, extra: "-"},
		re: regexp.MustCompile(`((?:\([2-9][0-9]{2}\) ?|[2-9][0-9]{2}[-. ])[2-9][0-9]{2}[-. ][0-9]{4})`)},
	{det: Amount, before: word, after: word,
		re:    regexp.MustCompile(`([A-Z]{3} ?` + number + `)`),
		valid: validCurrencyCode},
	{det: Amount, before: word, after: word,
		re:    regexp.MustCompile(`(` + number + ` ?[A-Z]{3})`),
		valid: validCurrencyCode},
	{det: Amount, hints: []string{"$", "€", "£", "¥", "₹", "₩", "₽", "₺", "₪", "₫", "₴", "₦", "₱", "฿", "₣", "₡"},
		after: word, // "US$5" and "C$5" are amounts too, so nothing glues before
		re: regexp.MustCompile(`((?:` + symbols + ` ?` + number + `)|(?:` + number + ` ?` + symbols + `))`)},
}

func (s *scanner) runPatterns() {
	t := s.text
	for i := range patternTable {
		p := &patternTable[i]
		if len(p.hints) > 0 && !containsAny(s.lower, p.hints) {
			continue
		}
		for _, m := range p.re.FindAllStringSubmatchIndex(t, -1) {
			start, end := m[2], m[3]
			if (start > 0 && p.before.has(t[start-1])) || (end < len(t) && p.after.has(t[end])) {
				continue
			}
			if p.valid != nil && !p.valid(t[start:end]) {
				continue
			}
			if p.det == PEMPrivateKey {
				end = pemEnd(t, end)
			}
			s.add(p.det, start, end)
		}
	}
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
func pemEnd(t string, from int) int {
	const endMark = "PRIVATE KEY-----"
	i := strings.Index(t[from:], "-----END ")
	if i < 0 {
		return len(t)
	}
	j := strings.Index(t[from+i:], endMark)
	if j < 0 {
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

// validCurrencyCode accepts the amount only when its three letters are an
// ISO 4217 code.
func validCurrencyCode(v string) bool {
	if len(v) >= 3 && isAlpha(v[0]) {
		return currencies[v[:3]]
	}
	return len(v) >= 3 && currencies[v[len(v)-3:]]
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
