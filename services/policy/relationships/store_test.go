package relationships

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/projection"
	"github.com/alpd-project/alpd/internal/streams"
)

const tenant = "example.org"

var hosted = []string{tenant, "other.example"}

var admin = &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_OPERATOR, Id: "op"}

func newBus(t *testing.T, srv *server.Server) *bus.Bus {
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
func newEnv(t *testing.T) (*server.Server, *bus.Bus) {
	t.Helper()
	srv := natstest.RunJetStream(t)
	b := newBus(t, srv)
	def, _ := streams.ByName(streams.Policy)
	if _, err := b.EnsureStream(context.Background(), def.Spec(hosted, streams.Limits{})); err != nil {
		t.Fatal(err)
	}
	return srv, b
}

func open(t *testing.T, b *bus.Bus) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, b, hosted, nil)
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

var (
	alice    = "p_alice"
	bob      = "p_bob"
	stranger = Party{Address: "eve@remote.example"}
)

// step is one command of a state machine case.
type step struct {
	do      string // request, request_back, accept, decline, block, unblock, accept_by_other
	wantErr error
	// want is the relationship of the asker to alice after the step.
	want State
}

// TestStateMachine runs each case's commands against a fresh store: a
// remote stranger asks alice to connect.
func TestStateMachine(t *testing.T) {
	_, b := newEnv(t)
	cases := []struct {
		name  string
		from  Party
		steps []step
	}{
		{"unknown is a stranger", stranger, nil},
		{"request then accept", stranger, []step{{do: "request", want: Requested}, {do: "accept", want: Connected}}},
		{"request then decline", stranger, []step{{do: "request", want: Requested}, {do: "decline", want: Declined}}},
		{"declined cannot be re-requested", stranger, []step{{do: "request", want: Requested}, {do: "decline", want: Declined},
			{do: "request", wantErr: ErrDeclined, want: Declined}}},
		{"accept a declined one", stranger, []step{{do: "request"}, {do: "decline"}, {do: "accept", wantErr: ErrState, want: Declined}}},
		{"decline an accepted one", stranger, []step{{do: "request"}, {do: "accept"}, {do: "decline", wantErr: ErrState, want: Connected}}},
		{"accept twice changes nothing", stranger, []step{{do: "request"}, {do: "accept"}, {do: "accept", want: Connected}}},
		{"repeated request stays requested", stranger, []step{{do: "request"}, {do: "request", want: Requested}}},
		{"accept before a request", stranger, []step{{do: "accept", wantErr: ErrNotFound, want: Stranger}}},
		{"only the person asked may accept", stranger, []step{{do: "request"}, {do: "accept_by_other", wantErr: ErrNotFound, want: Requested}}},
		{"block a stranger", stranger, []step{{do: "block", want: Blocked}, {do: "request", wantErr: ErrBlocked, want: Blocked}}},
		{"block a requested one", stranger, []step{{do: "request"}, {do: "block", want: Blocked}}},
		{"block an accepted one, unblock", stranger, []step{{do: "request"}, {do: "accept"}, {do: "block", want: Blocked}, {do: "unblock", want: Connected}}},
		{"block a declined one", stranger, []step{{do: "request"}, {do: "decline"}, {do: "block", want: Blocked}, {do: "unblock", want: Declined}}},
		{"a person of the tenant asks", Party{Person: bob}, []step{{do: "request", want: Requested}, {do: "accept", want: Connected}}},
		{"asking back is accepting", Party{Person: bob}, []step{{do: "request", want: Requested}, {do: "request_back", want: Connected}}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := open(t, b)
			// Each case in a tenant of its own would need a stream per
			// case; distinct people keep the cases apart instead.
			to := alice + "_" + string(rune('a'+i))
			from := c.from
			if from.Person != "" {
				from.Person += "_" + string(rune('a'+i))
			} else {
				from.Address = string(rune('a'+i)) + from.Address
			}
			id := ConnectionID(tenant, from, to)
			target := Target{TargetAddress, from.Address}
			if from.Person != "" {
				target = Target{TargetPerson, from.Person}
			}
			for _, st := range c.steps {
				var err error
				switch st.do {
				case "request":
					_, err = s.Request(ctx(t), tenant, from, to, "env1")
				case "request_back":
					_, err = s.Request(ctx(t), tenant, Party{Person: to}, from.Person, "")
				case "accept":
					_, err = s.Accept(ctx(t), tenant, to, id)
				case "accept_by_other":
					_, err = s.Accept(ctx(t), tenant, "p_mallory", id)
				case "decline":
					_, err = s.Decline(ctx(t), tenant, to, id)
				case "block":
					err = s.Block(ctx(t), tenant, to, target)
				case "unblock":
					err = s.Unblock(ctx(t), tenant, to, target)
				default:
					t.Fatalf("unknown step %q", st.do)
				}
				if !errors.Is(err, st.wantErr) || (st.wantErr == nil && err != nil) {
					t.Fatalf("%s: err %v, want %v", st.do, err, st.wantErr)
				}
				if st.want != "" {
					got, err := s.Relationship(tenant, from, to, nil)
					if err != nil || got != st.want {
						t.Fatalf("after %s: relationship %q (%v), want %q", st.do, got, err, st.want)
					}
				}
			}
			if len(c.steps) == 0 {
				if got, _ := s.Relationship(tenant, from, to, nil); got != Stranger {
					t.Fatalf("relationship %q, want stranger", got)
				}
			}
		})
	}
}

func TestOrgRules(t *testing.T) {
	_, b := newEnv(t)
	s := open(t, b)
	partner := Party{Address: "ann@partner.example"}
	check := func(from Party, roles []string, want State) {
		t.Helper()
		got, err := s.Relationship(tenant, from, alice, roles)
		if err != nil || got != want {
			t.Fatalf("%s to alice %v: %q (%v), want %q", from, roles, got, err, want)
		}
	}
	check(Party{Person: bob}, nil, Stranger)
	if err := s.SetOrgRule(ctx(t), tenant, OrgRule{Kind: SameOrg}, true, admin); err != nil {
		t.Fatal(err)
	}
	check(Party{Person: bob}, nil, OrgPreapproved)
	check(partner, []string{"finance"}, Stranger)
	rule := OrgRule{Kind: RoleMayReceiveFrom, Role: "finance", Domain: "Partner.Example"}
	if err := s.SetOrgRule(ctx(t), tenant, rule, true, admin); err != nil {
		t.Fatal(err)
	}
	check(partner, []string{"finance"}, OrgPreapproved)
	check(partner, []string{"sales"}, Stranger)
	check(Party{Address: "ann@sub.partner.example"}, []string{"finance"}, Stranger)
	// A person's block beats the organization's rule.
	if err := s.Block(ctx(t), tenant, alice, Target{TargetDomain, "partner.example"}); err != nil {
		t.Fatal(err)
	}
	check(partner, []string{"finance"}, Blocked)
	if err := s.SetOrgRule(ctx(t), tenant, OrgRule{Kind: SameOrg}, false, admin); err != nil {
		t.Fatal(err)
	}
	check(Party{Person: bob}, nil, Stranger)
	rules, _ := s.OrgRules(tenant)
	if len(rules) != 1 || rules[0].Domain != "partner.example" {
		t.Fatalf("rules %v", rules)
	}
	for _, bad := range []OrgRule{{Kind: "everyone"}, {Kind: SameOrg, Role: "x"}, {Kind: RoleMayReceiveFrom, Role: "finance", Domain: "not a domain"}} {
		if err := s.SetOrgRule(ctx(t), tenant, bad, true, admin); !errors.Is(err, ErrInvalid) {
			t.Errorf("%v: %v, want ErrInvalid", bad, err)
		}
	}
	if err := s.SetOrgRule(ctx(t), tenant, OrgRule{Kind: SameOrg}, true, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("no actor: %v, want ErrInvalid", err)
	}
}

func TestPendingAndValidation(t *testing.T) {
	_, b := newEnv(t)
	s := open(t, b)
	for _, a := range []string{"x@one.example", "y@two.example"} {
		if _, err := s.Request(ctx(t), tenant, Party{Address: a}, alice, "e"); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Block(ctx(t), tenant, alice, Target{TargetDomain, "two.example"}); err != nil {
		t.Fatal(err)
	}
	p, err := s.Pending(tenant, alice)
	if err != nil || len(p) != 1 || p[0].From.Address != "x@one.example" || p[0].EnvelopeID != "e" {
		t.Fatalf("pending %+v (%v)", p, err)
	}
	if all, _ := s.Connections(tenant, alice); len(all) != 2 {
		t.Fatalf("connections %+v", all)
	}
	bad := []struct {
		from Party
		to   string
	}{
		{Party{}, alice},
		{Party{Person: bob, Address: "b@x.example"}, alice},
		{Party{Address: "not an address"}, alice},
		{Party{Person: alice}, alice},
		{stranger, ""},
		{stranger, "p.with.dots"},
	}
	for _, c := range bad {
		if _, err := s.Request(ctx(t), tenant, c.from, c.to, ""); !errors.Is(err, ErrInvalid) {
			t.Errorf("request %+v → %q: %v, want ErrInvalid", c.from, c.to, err)
		}
	}
	if _, err := s.Request(ctx(t), "nobody.example", stranger, alice, ""); !errors.Is(err, ErrNotHosted) {
		t.Errorf("unhosted tenant: %v", err)
	}
	if err := s.Block(ctx(t), tenant, alice, Target{Kind: "everyone"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad target: %v", err)
	}
}

// TestReplicasConverge: two replicas on one stream, commands on both, end
// in the same state; a third opened later rebuilds it from the stream.
func TestReplicasConverge(t *testing.T) {
	srv, b := newEnv(t)
	r1, r2 := open(t, b), open(t, newBus(t, srv))
	if _, err := r1.Request(ctx(t), tenant, stranger, alice, "e1"); err != nil {
		t.Fatal(err)
	}
	id := ConnectionID(tenant, stranger, alice)
	waitFor(t, func() bool { _, err := r2.Connection(tenant, id); return err == nil })
	if _, err := r2.Accept(ctx(t), tenant, alice, id); err != nil {
		t.Fatal(err)
	}
	if err := r1.Block(ctx(t), tenant, bob, Target{TargetDomain, "remote.example"}); err != nil {
		t.Fatal(err)
	}
	if err := r2.SetOrgRule(ctx(t), tenant, OrgRule{Kind: SameOrg}, true, admin); err != nil {
		t.Fatal(err)
	}
	r3 := open(t, newBus(t, srv))
	for _, r := range []*Store{r1, r2, r3} {
		waitFor(t, func() bool { return r.Applied() == r2.Applied() })
		for _, q := range []struct {
			from Party
			to   string
			want State
		}{{stranger, alice, Connected}, {stranger, bob, Blocked}, {Party{Person: alice}, bob, OrgPreapproved}} {
			if got, _ := r.Relationship(tenant, q.from, q.to, nil); got != q.want {
				t.Errorf("replica: %s to %s is %q, want %q", q.from, q.to, got, q.want)
			}
		}
	}
}

// TestAcceptRace: the person's accept and decline reach two replicas at
// once; exactly one wins, the other is refused, and the stream holds one
// answer.
func TestAcceptRace(t *testing.T) {
	srv, b := newEnv(t)
	r1, r2 := open(t, b), open(t, newBus(t, srv))
	if _, err := r1.Request(ctx(t), tenant, stranger, alice, "e1"); err != nil {
		t.Fatal(err)
	}
	id := ConnectionID(tenant, stranger, alice)
	waitFor(t, func() bool { _, err := r2.Connection(tenant, id); return err == nil })
	// Both decide before either appends: the second append conflicts.
	var gate sync.WaitGroup
	gate.Add(2)
	hook := func(string) { gate.Done(); gate.Wait() }
	r1.beforeCommit, r2.beforeCommit = hook, hook
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Add(2)
	go func() { defer wg.Done(); _, errs[0] = r1.Accept(ctx(t), tenant, alice, id) }()
	go func() { defer wg.Done(); _, errs[1] = r2.Decline(ctx(t), tenant, alice, id) }()
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) || !(errors.Is(errs[0], ErrState) || errors.Is(errs[1], ErrState)) {
		t.Fatalf("accept: %v, decline: %v; want exactly one refused with ErrState", errs[0], errs[1])
	}
	subj, _ := streams.PolicySubject(tenant, streams.PolicyConnection, id)
	st, err := b.JetStream().Stream(ctx(t), b.StreamName(streams.Policy))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx(t), jetstream.WithSubjectFilter(subj))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[subj]; n != 2 {
		t.Fatalf("%d events on %s, want the request and one answer", n, subj)
	}
	c1, _ := r1.Connection(tenant, id)
	waitFor(t, func() bool { c2, _ := r2.Connection(tenant, id); return c2.State == c1.State })
}

// TestFreshness: a replica is fresh while its reader confirms, stale
// (not ready) once NATS is gone longer than the staleness allowed, fresh
// again when NATS is back; closed, it refuses commands.
func TestFreshness(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	start := func() *server.Server {
		o := natstest.Options(dir)
		o.Port = port
		return natstest.RunServer(t, o)
	}
	srv := start()
	b := newBus(t, srv)
	def, _ := streams.ByName(streams.Policy)
	if _, err := b.EnsureStream(ctx(t), def.Spec(hosted, streams.Limits{})); err != nil {
		t.Fatal(err)
	}
	s := open(t, b)
	if err := s.Fresh(3 * time.Second); err != nil {
		t.Fatalf("fresh after open: %v", err)
	}
	time.Sleep(2 * time.Second)
	if err := s.Fresh(3 * time.Second); err != nil {
		t.Fatalf("idle: %v", err)
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	waitFor(t, func() bool { return errors.Is(s.Fresh(2*time.Second), projection.ErrStale) })
	start()
	waitFor(t, func() bool { return s.Fresh(3*time.Second) == nil })
	if _, err := s.Request(ctx(t), tenant, stranger, alice, ""); err != nil {
		t.Fatalf("request after NATS came back: %v", err)
	}
	s.Close()
	if err := s.Fresh(time.Hour); !errors.Is(err, projection.ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
	if _, err := s.Request(ctx(t), tenant, stranger, alice, ""); !errors.Is(err, projection.ErrClosed) {
		t.Fatalf("request on a closed store: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestApplyRefusesWhatCommandsNeverWrite: events a command would never
// append (an answer without a request, an event on another aggregate's
// subject) change nothing, on every replica alike.
func TestApplyRefusesWhatCommandsNeverWrite(t *testing.T) {
	_, b := newEnv(t)
	s := open(t, b)
	id := ConnectionID(tenant, stranger, alice)
	subj, _ := streams.PolicySubject(tenant, streams.PolicyConnection, id)
	ev := acceptEvent(tenant, id, alice)
	if _, err := b.Append(ctx(t), subj, 0, ev); err != nil {
		t.Fatal(err)
	}
	other, _ := streams.PolicySubject(tenant, streams.PolicyConnection, "celsewhere")
	req := newEvent("connection_requested", tenant, id, personOrService(stranger))
	req.Body = &alpv1.Event_ConnectionRequested{ConnectionRequested: &alpv1.ConnectionRequested{
		Tenant: tenant, ConnectionId: id, FromAddress: stranger.Address, ToPerson: alice}}
	seq, err := b.Append(ctx(t), other, 0, req)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return s.Applied() >= seq })
	if got, _ := s.Relationship(tenant, stranger, alice, nil); got != Stranger {
		t.Fatalf("relationship %q after refused events, want stranger", got)
	}
	// The subject's version still advanced: a real request appends after it.
	if _, err := s.Request(ctx(t), tenant, stranger, alice, ""); err != nil {
		t.Fatal(err)
	}
}

// TestAcceptedByRemote: a remote party's acceptance of the person's own
// request connects the two, once; a declined or blocked party is refused
// and nothing is appended.
func TestAcceptedByRemote(t *testing.T) {
	_, b := newEnv(t)
	s := open(t, b)
	x := "xena@remote.example"
	c, err := s.AcceptedByRemote(ctx(t), tenant, alice, x, "env-req")
	if err != nil || c.State != ConnAccepted || c.From.Address != x || c.To != alice || c.EnvelopeID != "env-req" {
		t.Fatalf("accepted by remote: %+v (%v)", c, err)
	}
	if got, _ := s.Relationship(tenant, Party{Address: x}, alice, nil); got != Connected {
		t.Fatalf("relationship %q, want connected", got)
	}
	applied := s.Applied()
	if _, err := s.AcceptedByRemote(ctx(t), tenant, alice, x, "env-req"); err != nil || s.Applied() != applied {
		t.Fatalf("again: %v, applied %d → %d", err, applied, s.Applied())
	}
	// A pending request of the remote party's own is answered by it.
	y := Party{Address: "yan@remote.example"}
	if _, err := s.Request(ctx(t), tenant, y, alice, "env-y"); err != nil {
		t.Fatal(err)
	}
	if c, err := s.AcceptedByRemote(ctx(t), tenant, alice, y.Address, "env-a"); err != nil || c.State != ConnAccepted || c.EnvelopeID != "env-y" {
		t.Fatalf("pending then accepted by remote: %+v (%v)", c, err)
	}
	z := Party{Address: "zed@remote.example"}
	id, _ := s.Request(ctx(t), tenant, z, alice, "env-z")
	if _, err := s.Decline(ctx(t), tenant, alice, id.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcceptedByRemote(ctx(t), tenant, alice, z.Address, "env-z2"); !errors.Is(err, ErrDeclined) {
		t.Fatalf("declined: %v, want ErrDeclined", err)
	}
	if err := s.Block(ctx(t), tenant, alice, Target{TargetDomain, "blocked.example"}); err != nil {
		t.Fatal(err)
	}
	applied = s.Applied()
	if _, err := s.AcceptedByRemote(ctx(t), tenant, alice, "w@blocked.example", "env-w"); !errors.Is(err, ErrBlocked) || s.Applied() != applied {
		t.Fatalf("blocked: %v, want ErrBlocked and nothing appended", err)
	}
	for _, bad := range []struct{ person, remote, req string }{
		{"", x, "e"}, {alice, "not an address", "e"}, {alice, x, ""},
	} {
		if _, err := s.AcceptedByRemote(ctx(t), tenant, bad.person, bad.remote, bad.req); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
}

func TestRequestOf(t *testing.T) {
	_, b := newEnv(t)
	s := open(t, b)
	c, err := s.Request(ctx(t), tenant, stranger, alice, "env-1")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.RequestOf(tenant, alice, "env-1"); err != nil || got.ID != c.ID {
		t.Fatalf("request of env-1: %+v (%v)", got, err)
	}
	if _, err := s.RequestOf(tenant, bob, "env-1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another person's: %v, want ErrNotFound", err)
	}
	if _, err := s.RequestOf(tenant, alice, "env-2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another envelope: %v, want ErrNotFound", err)
	}
	if _, err := s.RequestOf(tenant, alice, ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("no envelope: %v, want ErrInvalid", err)
	}
}

// TestOrgCommits: an org rule's commit actions are validated, sorted and
// stored; they cover the pairs the rule covers, a block takes them away,
// and changing them is a new event of the same rule.
func TestOrgCommits(t *testing.T) {
	_, b := newEnv(t)
	s := open(t, b)
	partner := Party{Address: "ann@partner.example"}
	rule := OrgRule{Kind: RoleMayReceiveFrom, Role: "finance", Domain: "partner.example", Commits: []string{"payment", "meeting", "payment"}}
	if err := s.SetOrgRule(ctx(t), tenant, rule, true, admin); err != nil {
		t.Fatal(err)
	}
	id := OrgRuleID(tenant, rule)
	got, err := s.OrgCommits(tenant, partner, alice, []string{"finance"})
	if err != nil || len(got) != 1 || got[0].RuleID != id || !slices.Equal(got[0].Commits, []string{"meeting", "payment"}) {
		t.Fatalf("org commits %+v (%v)", got, err)
	}
	if got, _ := s.OrgCommits(tenant, partner, alice, []string{"sales"}); len(got) != 0 {
		t.Fatalf("a role the rule does not name: %+v", got)
	}
	applied := s.Applied()
	if err := s.SetOrgRule(ctx(t), tenant, rule, true, admin); err != nil || s.Applied() != applied {
		t.Fatalf("same rule again: %v, appended %v", err, s.Applied() != applied)
	}
	rule.Commits = []string{"meeting"}
	if err := s.SetOrgRule(ctx(t), tenant, rule, true, admin); err != nil || s.Applied() == applied {
		t.Fatalf("other commits: %v, appended %v", err, s.Applied() != applied)
	}
	if got, _ := s.OrgCommits(tenant, partner, alice, []string{"finance"}); len(got) != 1 || !slices.Equal(got[0].Commits, []string{"meeting"}) {
		t.Fatalf("after the change %+v", got)
	}
	if err := s.Block(ctx(t), tenant, alice, Target{TargetAddress, partner.Address}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.OrgCommits(tenant, partner, alice, []string{"finance"}); len(got) != 0 {
		t.Fatalf("blocked, still covered: %+v", got)
	}
	for _, bad := range [][]string{{"Meeting"}, {"a.b"}, {""}, {"a", "b", "c", "d", "e", "f", "g", "h", "i"}} {
		r := OrgRule{Kind: SameOrg, Commits: bad}
		if err := s.SetOrgRule(ctx(t), tenant, r, true, admin); !errors.Is(err, ErrInvalid) {
			t.Errorf("commits %q: %v, want ErrInvalid", bad, err)
		}
	}
}
