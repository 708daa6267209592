// Package dlp finds sensitive data in free text: payment cards, IBANs, US
// social security numbers and secrets (private keys, JWTs, cloud, GitHub,
// Slack and Stripe credentials, high-entropy values after a secret-sounding
// key), which block a free-text field, and emails, phone numbers and
// amounts with a currency, which are flagged for the recipient.
//
// A Finding names the detector and the byte span, never the matched value:
// a decision, a log line or a ledger entry that says "payment_card at bytes
// 12–31" can travel where the card number must not. Detectors run on
// freetext.Normalized text, so fullwidth digits, zero-width characters
// splitting a token and bidi tricks are folded away before matching, and
// the offsets point into the text the recipient would read.
//
// Every detector pairs a shape (a regular expression or a digit-group scan)
// with a check that the shape alone cannot make — Luhn and IIN ranges for
// cards, the country's length and mod-97 for IBANs, area/group/serial rules
// for SSNs, a decodable JSON header for JWTs, Shannon entropy for generic
// secrets — to keep false positives rare. docs/policy.md lists each
// detector's known false positives and negatives.
package dlp

import (
	"fmt"
	"slices"
	"strings"

	"github.com/alpd-project/alpd/services/policy/freetext"
)

// Detector names what was found. The names are stable: they appear in
// decisions, ledger entries and conformance vectors.
type Detector string

// The detectors. Blocking ones first.
const (
	PaymentCard        Detector = "payment_card"
	IBAN               Detector = "iban"
	USSSN              Detector = "us_ssn"
	PEMPrivateKey      Detector = "pem_private_key"
	JWT                Detector = "jwt"
	AWSAccessKeyID     Detector = "aws_access_key_id"
	AWSSecretAccessKey Detector = "aws_secret_access_key"
	GCPAPIKey          Detector = "gcp_api_key"
	AzureStorageKey    Detector = "azure_storage_key"
	GitHubToken        Detector = "github_token"
	SlackToken         Detector = "slack_token"
	SlackWebhook       Detector = "slack_webhook"
	StripeSecretKey    Detector = "stripe_secret_key"
	HighEntropySecret  Detector = "high_entropy_secret"
	Email              Detector = "email"
	Phone              Detector = "phone"
	Amount             Detector = "amount"
)

// Severity says what a finding does to the field.
type Severity string

const (
	// Block: the field does not cross.
	Block Severity = "block"
	// Flag: the field crosses, and the recipient is told what it holds.
	Flag Severity = "flag"
)

var severities = map[Detector]Severity{
	PaymentCard: Block, IBAN: Block, USSSN: Block, PEMPrivateKey: Block, JWT: Block,
	AWSAccessKeyID: Block, AWSSecretAccessKey: Block, GCPAPIKey: Block, AzureStorageKey: Block,
	GitHubToken: Block, SlackToken: Block, SlackWebhook: Block, StripeSecretKey: Block,
	HighEntropySecret: Block, Email: Flag, Phone: Flag, Amount: Flag,
}

// Detectors lists every detector, blocking ones first.
func Detectors() []Detector {
	return []Detector{PaymentCard, IBAN, USSSN, PEMPrivateKey, JWT, AWSAccessKeyID,
		AWSSecretAccessKey, GCPAPIKey, AzureStorageKey, GitHubToken, SlackToken, SlackWebhook,
		StripeSecretKey, HighEntropySecret, Email, Phone, Amount}
}

// SeverityOf is the severity every finding of d has.
func SeverityOf(d Detector) Severity { return severities[d] }

// Finding is one match: which detector, how severe, and where, as byte
// offsets [Start, End) into the normalized text. It holds no part of the
// value, so it may be logged and stored.
type Finding struct {
	Detector Detector `json:"detector"`
	Severity Severity `json:"severity"`
	Start    int      `json:"start"`
	End      int      `json:"end"`
}

// String renders the finding without the value.
func (f Finding) String() string {
	return fmt.Sprintf("%s (%s) at bytes %d-%d", f.Detector, f.Severity, f.Start, f.End)
}

// Blocks reports whether any finding blocks the field.
func Blocks(fs []Finding) bool {
	return slices.ContainsFunc(fs, func(f Finding) bool { return f.Severity == Block })
}

// Scan runs every detector over the normalized text and returns the
// findings ordered by offset. A flag inside a blocking finding's span, and a
// generic high-entropy finding inside a specific secret's span, are dropped:
// they would say nothing the stronger finding does not.
func Scan(n freetext.Normalized) []Finding {
	return scan(n.Text())
}

func scan(text string) []Finding {
	if text == "" {
		return nil
	}
	s := &scanner{text: text, lower: asciiLower(text)}
	s.digitRuns()
	s.iban()
	s.runPatterns()
	s.highEntropyKV()
	s.emails()
	s.amountCodes()
	return s.result()
}

type scanner struct {
	text string
	// lower is text with ASCII letters lowercased and every other byte as
	// it is, so its offsets are text's: case-insensitive keys match on it.
	lower    string
	found    []Finding
	noPEMEnd int // >0: no private key END line from this offset on

}

func (s *scanner) add(d Detector, start, end int) {
	s.found = append(s.found, Finding{Detector: d, Severity: severities[d], Start: start, End: end})
}

func (s *scanner) result() []Finding {
	if len(s.found) == 0 {
		return nil
	}
	fs := s.found
	slices.SortFunc(fs, func(a, b Finding) int {
		if a.Start != b.Start {
			return a.Start - b.Start
		}
		if a.End != b.End {
			return b.End - a.End
		}
		return strings.Compare(string(a.Detector), string(b.Detector))
	})
	// Spans of blocking findings, for the flag and high-entropy drops.
	var specific, anyBlock spans
	for _, f := range fs {
		if f.Severity == Block {
			anyBlock = append(anyBlock, f)
			if f.Detector != HighEntropySecret {
				specific = append(specific, f)
			}
		}
	}
	specific, anyBlock = specific.merged(), anyBlock.merged()
	out := fs[:0:0]
	for _, f := range fs {
		switch {
		case f.Severity == Flag && anyBlock.overlaps(f):
			continue
		case f.Detector == HighEntropySecret && specific.overlaps(f):
			continue
		}
		// The same detector twice over one span (e.g. two phone shapes).
		if k := len(out) - 1; k >= 0 && out[k].Detector == f.Detector && f.Start < out[k].End {
			out[k].End = max(out[k].End, f.End)
			continue
		}
		out = append(out, f)
	}
	return out
}

// spans is a list of findings used as intervals; merged sorts by start (the
// input already is) and joins overlapping ones so overlaps can binary
// search: a text full of findings must not cost quadratic time.
type spans []Finding

func (s spans) merged() spans {
	var out spans
	for _, f := range s {
		if k := len(out) - 1; k >= 0 && f.Start < out[k].End {
			out[k].End = max(out[k].End, f.End)
			continue
		}
		out = append(out, f)
	}
	return out
}

func (s spans) overlaps(f Finding) bool {
	// First merged span ending after f starts.
	i, _ := slices.BinarySearchFunc(s, f.Start, func(g Finding, start int) int {
		if g.End <= start {
			return -1
		}
		return 1
	})
	return i < len(s) && s[i].Start < f.End
}

func asciiLower(s string) string {
	i := 0
	for i < len(s) && (s[i] < 'A' || s[i] > 'Z') {
		i++
	}
	if i == len(s) {
		return s
	}
	b := []byte(s)
	for ; i < len(b); i++ {
		if b[i] >= 'A' && b[i] <= 'Z' {
			b[i] += 'a' - 'A'
		}
	}
	return string(b)
}
