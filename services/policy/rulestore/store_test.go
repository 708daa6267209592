package rulestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/projection"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/policy/rules"
)

const tenant = "example.org"

var hosted = []string{tenant, "other.example"}

var (
	admin  = Author{ByAdmin, "admin1"}
	agent  = Author{ByAgent, "client_1"}
	person = func(id string) Author { return Author{ByPerson, id} }
)

func newBus(t testing.TB, srv *server.Server) *bus.Bus {
	t.Helper()
	nc := natstest.Connect(t, srv, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	b, err := bus.New(nc, bus.Options{Namespace: "t", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newEnv starts a server with the policy stream, as the policy service
// creates it, and a bus on it.
func newEnv(t testing.TB) (*server.Server, *bus.Bus) {
	t.Helper()
	srv := natstest.RunJetStream(t)
	b := newBus(t, srv)
	def, _ := streams.ByName(streams.Policy)
	if _, err := b.EnsureStream(context.Background(), def.Spec(hosted, streams.Limits{})); err != nil {
		t.Fatal(err)
	}
	return srv, b
}

func engine(t testing.TB) *rules.Engine {
	t.Helper()
	e, err := rules.New(rules.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func open(t *testing.T, b *bus.Bus) *Store { return openB(t, b) }

func openB(t testing.TB, b *bus.Bus) *Store {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(c, b, hosted, engine(t), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func template(t *testing.T, p rules.Party) string { return templateB(t, p) }

func templateB(t testing.TB, p rules.Party) string {
	t.Helper()
	b, err := rules.Template(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const extraForbid = `
@id("no-secret-to-acme")
@reason("person_forbids")
forbid (principal, action == Alp::Action::"share_field", resource)
when { resource.class == "confidential" };
`

const extraPermit = `
@id("share-everything")
@reason("sender_permits")
permit (principal, action == Alp::Action::"share_field", resource);
`

func lastSeq(t *testing.T, b *bus.Bus, subj string) uint64 {
	t.Helper()
	seq, err := b.LastSequence(ctx(t), subj)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

func rulesSubject(t *testing.T, party rules.Party, owner string) string {
	t.Helper()
	subj, err := streams.PolicyRulesSubject(tenant, string(party), ownerToken(party, owner))
	if err != nil {
		t.Fatal(err)
	}
	return subj
}

// waitVersion waits until s answers version want of party's set of owner.
func waitVersion(t *testing.T, s *Store, party rules.Party, owner string, want uint64) {
	t.Helper()
	testkit.Eventually(t, 5*time.Second, func() error {
		_, v, err := s.Current(tenant, party, owner)
		if err != nil {
			return err
		}
		if v != want {
			return fmt.Errorf("at version %d", v)
		}
		return nil
	}, fmt.Sprintf("version %d", want))
}

// TestPutVisibleOnAnotherReplica: a version one replica stores is the
// other's current set, and the other can write the next version at once,
// even before its projection applied the first.
func TestPutVisibleOnAnotherReplica(t *testing.T) {
	_, b := newEnv(t)
	r1, r2 := open(t, b), open(t, b)
	text1 := template(t, rules.PartySender) + extraForbid
	v, err := r1.Put(ctx(t), tenant, rules.PartySender, "p_alice", []byte(text1), person("p_alice"), 0)
	if err != nil || v != 1 {
		t.Fatalf("put v1: %d, %v", v, err)
	}
	text2 := text1 + extraPermit
	if v, err = r2.Put(ctx(t), tenant, rules.PartySender, "p_alice", []byte(text2), person("p_alice"), 1); err != nil || v != 2 {
		t.Fatalf("put v2 on the other replica: %d, %v", v, err)
	}
	waitVersion(t, r1, rules.PartySender, "p_alice", 2)
	got, err := r1.Get(tenant, rules.PartySender, "p_alice")
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Text) != text2 || got.By != ByPerson || got.Actor != "p_alice" || got.TighteningOnly {
		t.Fatalf("version 2 is %+v", got)
	}
	// Organization sets are the tenant's.
	if v, err := r2.Put(ctx(t), tenant, rules.PartySenderOrg, tenant, []byte(template(t, rules.PartySenderOrg)), admin, 0); err != nil || v != 1 {
		t.Fatalf("org set: %d, %v", v, err)
	}
	waitVersion(t, r1, rules.PartySenderOrg, tenant, 1)
	if err := r1.Fresh(10 * time.Second); err != nil {
		t.Fatalf("fresh replica: %v", err)
	}
}

type refusedCase struct {
	Name string `json:"name"`
	Text string `json:"text"`
	Pad  int    `json:"pad"`
	Code string `json:"code"`
	Line int    `json:"line"`
}

// TestInvalidRefused (testdata/refused.json): every invalid set is a
// *rules.ValidationError with the case's code (and line where given), and
// nothing reaches the stream.
func TestInvalidRefused(t *testing.T) {
	_, b := newEnv(t)
	s := open(t, b)
	raw, err := os.ReadFile("testdata/refused.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []refusedCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	subj := rulesSubject(t, rules.PartySender, "p_bob")
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			text := c.Text
			if c.Pad > 0 {
				text = template(t, rules.PartySender) + "// " + strings.Repeat("x", c.Pad) + "\n"
			}
			_, err := s.Put(ctx(t), tenant, rules.PartySender, "p_bob", []byte(text), person("p_bob"), 0)
			var ve *rules.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("want a ValidationError, got %v", err)
			}
			if !ve.Has(rules.Code(c.Code)) {
				t.Fatalf("want code %s, got %v", c.Code, ve)
			}
			if c.Line > 0 {
				var ok bool
				for _, p := range ve.Problems {
					ok = ok || (p.Code == rules.Code(c.Code) && p.Line == c.Line && p.Column > 0)
				}
				if !ok {
					t.Fatalf("want %s at line %d with a column, got %v", c.Code, c.Line, ve)
				}
			}
			if seq := lastSeq(t, b, subj); seq != 0 {
				t.Fatalf("refused set stored at %d", seq)
			}
			if _, v, err := s.Current(tenant, rules.PartySender, "p_bob"); err != nil || v != 0 {
				t.Fatalf("current after refusal: %d, %v", v, err)
			}
		})
	}
}

// TestAgentOnlyTightens: an agent's write that adds a permit, drops or
// changes a policy is refused with loosening_refused and stores nothing;
// one that adds a forbid is stored, marked tightening only.
func TestAgentOnlyTightens(t *testing.T) {
	_, b := newEnv(t)
	s := open(t, b)
	base := template(t, rules.PartySender)
	subj := rulesSubject(t, rules.PartySender, "p_carol")
	for name, text := range map[string]string{
		"adds a permit":   base + extraPermit,
		"drops a forbid":  base[:strings.Index(base, `@id("sender-no-confidential-from-consumer")`)],
		"changes a rule":  strings.Replace(base, `resource.class == "confidential" && principal.trust_class == "consumer"`, `false`, 1),
		"replaces it all": extraForbid,
	} {
		_, err := s.Put(ctx(t), tenant, rules.PartySender, "p_carol", []byte(text), agent, 0)
		var ve *rules.ValidationError
		if !errors.As(err, &ve) || !ve.Has(rules.CodeLooseningRefused) {
			t.Fatalf("%s: want loosening_refused, got %v", name, err)
		}
		if seq := lastSeq(t, b, subj); seq != 0 {
			t.Fatalf("%s: refused set stored at %d", name, seq)
		}
	}
	v, err := s.Put(ctx(t), tenant, rules.PartySender, "p_carol", []byte(base+extraForbid), agent, 0)
	if err != nil || v != 1 {
		t.Fatalf("agent adding a forbid: %d, %v", v, err)
	}
	got, _ := s.Get(tenant, rules.PartySender, "p_carol")
	if got.By != ByAgent || !got.TighteningOnly || got.Actor != agent.ID {
		t.Fatalf("stored %+v", got)
	}
	// Tightening is judged against the stored version, not the template.
	if _, err := s.Put(ctx(t), tenant, rules.PartySender, "p_carol", []byte(base), agent, 1); !errors.As(err, new(*rules.ValidationError)) {
		t.Fatalf("agent dropping its own forbid: %v", err)
	}
	// An agent never writes an organization's set.
	if _, err := s.Put(ctx(t), tenant, rules.PartySenderOrg, tenant, []byte(template(t, rules.PartySenderOrg)), agent, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("agent writing the org set: %v", err)
	}
}

// TestConcurrentPutsOneWins: two replicas both at version 1 write version
// 2; exactly one is stored, the other gets version_conflict.
func TestConcurrentPutsOneWins(t *testing.T) {
	_, b := newEnv(t)
	r1, r2 := open(t, b), open(t, b)
	base := template(t, rules.PartyRecipient)
	if _, err := r1.Put(ctx(t), tenant, rules.PartyRecipient, "p_dan", []byte(base), person("p_dan"), 0); err != nil {
		t.Fatal(err)
	}
	waitVersion(t, r2, rules.PartyRecipient, "p_dan", 1)

	// Forced race: r2 commits between r1's read and r1's append.
	r1.beforeCommit = func(string) {
		r1.beforeCommit = nil
		if _, err := r2.Put(ctx(t), tenant, rules.PartyRecipient, "p_dan", []byte(base+"// r2\n"), person("p_dan"), 1); err != nil {
			t.Errorf("r2: %v", err)
		}
	}
	_, err := r1.Put(ctx(t), tenant, rules.PartyRecipient, "p_dan", []byte(base+"// r1\n"), person("p_dan"), 1)
	var ce *ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, ErrVersionConflict) || ce.Current != 2 || ce.Code() != CodeVersionConflict {
		t.Fatalf("loser: want version_conflict at 2, got %v", err)
	}
	got, _ := r1.Get(tenant, rules.PartyRecipient, "p_dan")
	if got.Version != 2 || !strings.HasSuffix(string(got.Text), "// r2\n") {
		t.Fatalf("winner's version not current: %d %q", got.Version, got.Text[len(got.Text)-8:])
	}

	// Free race: both write version 3 at once.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, r := range []*Store{r1, r2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = r.Put(ctx(t), tenant, rules.PartyRecipient, "p_dan", []byte(base+"// "+string(rune('a'+i))+"\n"), person("p_dan"), 2)
		}()
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("want exactly one winner: %v, %v", errs[0], errs[1])
	}
	for _, err := range errs {
		if err != nil && !errors.Is(err, ErrVersionConflict) {
			t.Fatalf("loser: %v", err)
		}
	}
	if seq, applied := lastSeq(t, b, rulesSubject(t, rules.PartyRecipient, "p_dan")), r1.Applied(); seq != 3 || applied < 3 {
		t.Fatalf("stream at %d (applied %d), want 3 events", seq, applied)
	}
}

// TestCurrentFallsBackToTemplate: a set never written is the party's
// template, version 0, for every party.
func TestCurrentFallsBackToTemplate(t *testing.T) {
	_, b := newEnv(t)
	s := open(t, b)
	for _, c := range []struct {
		party rules.Party
		owner string
	}{{rules.PartySender, "p_erin"}, {rules.PartyRecipient, "p_erin"}, {rules.PartySenderOrg, tenant}, {rules.PartyRecipientOrg, tenant}} {
		comp, v, err := s.Current(tenant, c.party, c.owner)
		if err != nil || v != 0 {
			t.Fatalf("%s: %d, %v", c.party, v, err)
		}
		want, _ := engine(t).Validate(c.party, []byte(template(t, c.party)))
		if comp.Hash != want.Hash || comp.Party != c.party {
			t.Fatalf("%s: compiled %s, want the template's %s", c.party, comp.Hash, want.Hash)
		}
	}
	if _, _, err := s.Current(tenant, rules.PartySenderOrg, "p_erin"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an org set owned by a person: %v", err)
	}
	if _, _, err := s.Current("elsewhere.example", rules.PartySender, "p_erin"); !errors.Is(err, ErrNotHosted) {
		t.Fatalf("unhosted tenant: %v", err)
	}
}

// TestCompileOncePerVersion: reading a version again answers the same
// compiled set; a new version is compiled anew.
func TestCompileOncePerVersion(t *testing.T) {
	_, b := newEnv(t)
	s := open(t, b)
	a, _, _ := s.Current(tenant, rules.PartySender, "p_finn")
	again, _, _ := s.Current(tenant, rules.PartySender, "p_gail") // same template
	if a != again || s.cache.Len() != 1 {
		t.Fatalf("template compiled twice (cache %d)", s.cache.Len())
	}
	if _, err := s.Put(ctx(t), tenant, rules.PartySender, "p_finn", []byte(template(t, rules.PartySender)+extraForbid), person("p_finn"), 0); err != nil {
		t.Fatal(err)
	}
	v1, ver, _ := s.Current(tenant, rules.PartySender, "p_finn")
	v1again, _, _ := s.Current(tenant, rules.PartySender, "p_finn")
	if ver != 1 || v1 == a || v1 != v1again || s.cache.Len() != 2 {
		t.Fatalf("version 1: %d, new %v, same %v, cache %d", ver, v1 != a, v1 == v1again, s.cache.Len())
	}
}

// TestForeignEventsRefused: events Put would never append (a version out
// of turn, a digest not of the text, an org set on a person's subject)
// change nothing.
func TestForeignEventsRefused(t *testing.T) {
	_, b := newEnv(t)
	s := open(t, b)
	text := []byte(template(t, rules.PartySender))
	set, err := engine(t).Validate(rules.PartySender, text)
	if err != nil {
		t.Fatal(err)
	}
	good := func() *alpv1.Event {
		return s.event(tenant, rules.PartySender, "p_hal", 1, set, person("p_hal"), false)
	}
	for name, ev := range map[string]*alpv1.Event{
		"version out of turn": func() *alpv1.Event { e := good(); e.GetRuleSetVersionStored().Version = 2; return e }(),
		"wrong digest": func() *alpv1.Event {
			e := good()
			e.GetRuleSetVersionStored().Digest = strings.Repeat("0", 64)
			return e
		}(),
		"other owner": func() *alpv1.Event { e := good(); e.GetRuleSetVersionStored().Owner = "p_ivy"; return e }(),
		"no writer":   func() *alpv1.Event { e := good(); e.GetRuleSetVersionStored().By = 0; return e }(),
	} {
		if err := s.apply(rulesSubject(t, rules.PartySender, "p_hal"), 1, ev); err == nil {
			t.Fatalf("%s: applied", name)
		}
	}
	if _, v, _ := s.Current(tenant, rules.PartySender, "p_hal"); v != 0 {
		t.Fatalf("a refused event made version %d", v)
	}
	if err := s.apply(rulesSubject(t, rules.PartySender, "p_hal"), 1, good()); err != nil {
		t.Fatalf("the good event: %v", err)
	}
}

// TestClosed: a closed store is not fresh and takes no writes.
func TestClosed(t *testing.T) {
	_, b := newEnv(t)
	s := open(t, b)
	s.Close()
	if err := s.Fresh(time.Minute); err == nil {
		t.Fatal("closed store fresh")
	}
	if _, err := s.Put(ctx(t), tenant, rules.PartySender, "p_j", []byte(template(t, rules.PartySender)), person("p_j"), 0); !errors.Is(err, projection.ErrClosed) {
		t.Fatalf("put on a closed store: %v", err)
	}
}
