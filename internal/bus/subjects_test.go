package bus

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/alpd-project/alpd/internal/natstest"
)

// hostileTokens are subject tokens an outsider could send (issue 10
// finding 1): each must be refused before it reaches NATS.
var hostileTokens = map[string]string{
	"empty":                       "",
	"4000 bytes":                  strings.Repeat("a", 4000),
	"8000 bytes":                  strings.Repeat("a", 8000),
	"one byte over the token max": strings.Repeat("a", MaxTokenBytes+1),
	"separator":                   "a.b",
	"wildcard":                    "*",
	"wildcard inside":             "a*",
	"full wildcard":               ">",
	"full wildcard inside":        "a>b",
	"space":                       "a b",
	"tab":                         "a\tb",
	"CR LF":                       "a\r\nPUB x 1",
	"NUL":                         "a\x00b",
	"DEL":                         "a\x7fb",
	"non-ASCII":                   "caf\u00e9",
}

// TestSubjectBuildersRefuseHostileTokens: Subject refuses a hostile token
// in every position it builds from a caller's input, and CheckSubject the
// same token in a subject built by hand, each with ErrInvalidSubject and
// an error that does not repeat kilobytes of input.
func TestSubjectBuildersRefuseHostileTokens(t *testing.T) {
	builders := map[string]func(tok string) (string, error){
		"Subject kind":   func(tok string) (string, error) { return Subject(tok, tenant, "p1", "e1") },
		"Subject tenant": func(tok string) (string, error) { return Subject("send", tok, "p1", "e1") },
		"Subject person": func(tok string) (string, error) { return Subject("send", tenant, tok, "e1") },
		"Subject id":     func(tok string) (string, error) { return Subject("send", tenant, "p1", tok) },
		"CheckSubject": func(tok string) (string, error) {
			s := "alp.send.example_org.p1." + tok
			return s, CheckSubject(s)
		},
	}
	for bname, build := range builders {
		for tname, tok := range hostileTokens {
			switch {
			case bname == "Subject tenant" && tname == "separator":
				// A tenant's dots become underscores (TenantToken); a
				// domain is validated where it is configured.
				continue
			case bname == "CheckSubject" && tname == "separator":
				continue // in a whole subject, one more token
			}
			t.Run(bname+"/"+tname, func(t *testing.T) {
				s, err := build(tok)
				if !errors.Is(err, ErrInvalidSubject) {
					t.Fatalf("built %q, err %v; want ErrInvalidSubject", clip(s), err)
				}
				if len(err.Error()) > 300 {
					t.Errorf("error is %d bytes long: %.100s…", len(err.Error()), err)
				}
			})
		}
	}

	// The bounds themselves are accepted; a subject over the total is not,
	// even when each token is within its bound.
	longest := strings.Repeat("a", MaxTokenBytes)
	if _, err := Subject("send", tenant, "p1", longest); err != nil {
		t.Errorf("a token of exactly %d bytes: %v", MaxTokenBytes, err)
	}
	if _, err := Subject("send", tenant, longest, longest, longest, longest); !errors.Is(err, ErrInvalidSubject) {
		t.Errorf("a subject over %d bytes of valid tokens: %v; want ErrInvalidSubject", MaxSubjectBytes, err)
	}
	over := strings.Repeat(longest+".", 4) + "a"
	if err := CheckSubject(over); !errors.Is(err, ErrInvalidSubject) {
		t.Errorf("CheckSubject of %d bytes: %v; want ErrInvalidSubject", len(over), err)
	}
	for _, ok := range []string{"alp.send.example_org.p1.0192f0c4-7b1e-7a00-8000-000000000001", "alp.identity.example_org.pat.x_Y-z"} {
		if err := CheckSubject(ok); err != nil {
			t.Errorf("CheckSubject(%q): %v", ok, err)
		}
	}
}

// TestBusRefusesHostileSubjects: every bus call that takes a subject
// refuses one NATS would choke on, with ErrInvalidSubject, and the
// connection stays open. Before the checks, the 4000-byte subject made
// nats-server close the connection ("maximum control line exceeded").
func TestBusRefusesHostileSubjects(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunJetStream(t))
	b := newBus(t, nc, nil)
	ensure(t, b, logSpec())
	ctx := context.Background()
	for tname, tok := range hostileTokens {
		if tname == "separator" {
			continue // in a whole subject, one more token
		}
		subject := "alp.send.example_org.p1." + tok
		calls := map[string]func() error{
			"Publish": func() error { _, err := b.Publish(ctx, subject, sendEvent("e-"+tname, "")); return err },
			"Append":  func() error { _, err := b.Append(ctx, subject, 0, sendEvent("e-"+tname, "")); return err },
			"NewMsg":  func() error { _, err := NewMsg(subject, sendEvent("e-"+tname, "")); return err },
			"LastMessage": func() error {
				_, err := b.LastMessage(ctx, subject)
				return err
			},
			"LastMessageIn": func() error {
				_, err := b.LastMessageIn(ctx, "send", subject)
				return err
			},
			"LastSequence": func() error {
				_, err := b.LastSequence(ctx, subject)
				return err
			},
		}
		for cname, call := range calls {
			t.Run(cname+"/"+tname, func(t *testing.T) {
				if err := call(); !errors.Is(err, ErrInvalidSubject) {
					t.Errorf("%s on a subject with token %s: %v; want ErrInvalidSubject", cname, clip(tok), err)
				}
			})
		}
	}
	if nc.IsClosed() {
		t.Fatalf("NATS connection closed: %v", nc.LastError())
	}
	if _, err := b.Append(ctx, "alp.send.example_org.p1.e1", 0, sendEvent("ok", "")); err != nil {
		t.Fatalf("a valid append after the refusals: %v", err)
	}
}
