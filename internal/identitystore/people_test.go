package identitystore

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/testkit"
)

// allBytes is every stored message (subject, data, headers) of every
// stream on the server: the identity stream and every KV bucket.
func (e *rig) allBytes(t *testing.T) []byte {
	t.Helper()
	ctx := context.Background()
	var all bytes.Buffer
	names := e.js.StreamNames(ctx)
	for name := range names.Name() {
		st, err := e.js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				continue // purged
			}
			all.WriteString(m.Subject)
			all.Write(m.Data)
			for k, vs := range m.Header {
				all.WriteString(k)
				for _, v := range vs {
					all.WriteString(v)
				}
			}
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return all.Bytes()
}

// Finding 10: the test IdP's issuer changed (a restart on another port), so
// the same subject and address arrive from another issuer. The old code
// bound a second person for the same address; now the sign-in is refused,
// nothing is stored, and the address stays the first person's.
func TestOneAddressOnePerson(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	s := e.open(t)
	ctx := ctxT(t)
	ana := mustBind(t, s, "test-ana", "ana@example.org")
	before := e.kinds(t)
	for _, account := range []struct{ issuer, subject, address string }{
		{"http://127.0.0.1:40001", "test-ana", "ana@example.org"}, // issuer changed
		{iss, "another-subject", "ana@example.org"},               // subject changed
		{"http://127.0.0.1:40002", "test-ana", "ANA@example.org"}, // the address in another case
	} {
		_, err := s.BindPerson(ctx, tenant, account.issuer, account.subject, account.address, nil)
		if !errors.Is(err, ErrAddressTaken) {
			t.Fatalf("%+v: %v, want ErrAddressTaken", account, err)
		}
		if _, err := s.PersonBySubject(ctx, tenant, account.issuer, account.subject); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%+v: a refused sign-in bound the account: %v", account, err)
		}
	}
	if after := e.kinds(t); after["person_bound"] != before["person_bound"] {
		t.Fatalf("refused sign-ins stored a person: %v → %v", before, after)
	}
	if p, err := s.PersonByAddress(ctx, tenant, "ana@example.org"); err != nil || p.ID != ana.ID {
		t.Fatalf("address owner %+v, %v", p, err)
	}
	// Another tenant's same local part is another address.
	if _, err := s.BindPerson(ctx, other, "http://127.0.0.1:40001", "test-ana", "ana@other.example", nil); err != nil {
		t.Fatal(err)
	}
}

// Finding 10, across replicas: first sign-ins of two accounts with one
// address on two replicas at once bind exactly one person.
func TestOneAddressOnePersonAcrossReplicas(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	stores := []*Store{e.open(t), e.open(t), e.open(t)}
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make([]error, len(stores))
	for i, s := range stores {
		wg.Go(func() {
			_, errs[i] = s.BindPerson(ctx, tenant, "http://127.0.0.1:"+string(rune('1'+i))+"0000", "test-ana", "ana@example.org", nil)
		})
	}
	wg.Wait()
	bound := 0
	for _, err := range errs {
		switch {
		case err == nil:
			bound++
		case !errors.Is(err, ErrAddressTaken):
			t.Fatal(err)
		}
	}
	if bound != 1 {
		t.Fatalf("%d persons bound to one address: %v", bound, errs)
	}
	if k := e.kinds(t); k["person_bound"] != 1 {
		t.Fatalf("events %v", k)
	}
}

// Re-binding is explicit: an operator moves the person to the new account;
// the person keeps their id (and tokens), the old account no longer signs
// in, and the audit event names the operator without naming any account.
func TestRebindPerson(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	s := e.open(t)
	ctx := ctxT(t)
	ana := mustBind(t, s, "test-ana", "ana@example.org", "staff")
	const newIss, newSub = "http://127.0.0.1:45555", "ana-at-the-new-idp"
	op := &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_OPERATOR, Id: "operator"}
	moved, err := s.RebindPerson(WithActor(ctx, op), tenant, ana.ID, newIss, newSub, "the IdP moved")
	if err != nil {
		t.Fatal(err)
	}
	if moved.ID != ana.ID || moved.Issuer != newIss || moved.Subject != newSub || moved.Address != ana.Address {
		t.Fatalf("re-bound %+v", moved)
	}
	// The next sign-in from the new account is the same person.
	if p, err := s.BindPerson(ctx, tenant, newIss, newSub, "ana@example.org", []string{"staff"}); err != nil || p.ID != ana.ID {
		t.Fatalf("sign-in after re-binding: %+v, %v", p, err)
	}
	// The old account is refused: the address is the re-bound person's.
	if _, err := s.BindPerson(ctx, tenant, iss, "test-ana", "ana@example.org", nil); !errors.Is(err, ErrAddressTaken) {
		t.Fatalf("old account after re-binding: %v", err)
	}
	// Another person's account cannot be taken.
	bo := mustBind(t, s, "test-bo", "bo@example.org")
	if _, err := s.RebindPerson(ctx, tenant, ana.ID, iss, "test-bo", "x"); !errors.Is(err, ErrAccountTaken) {
		t.Fatalf("re-bind to bo's account: %v", err)
	}
	if p, err := s.PersonBySubject(ctx, tenant, iss, "test-bo"); err != nil || p.ID != bo.ID {
		t.Fatalf("bo after a refused re-binding: %+v, %v", p, err)
	}
	var audit *alpv1.Event
	for _, m := range e.messages(t) {
		if m.Header.Get(bus.HeaderEventType) == "person_rebound" {
			if audit, err = bus.Decode(m.Data); err != nil {
				t.Fatal(err)
			}
			for _, needle := range []string{iss, newIss, newSub, "test-ana", ana.Address} {
				if bytes.Contains(m.Data, []byte(needle)) {
					t.Errorf("the audit event names %q", needle)
				}
			}
		}
	}
	rb := audit.GetPersonRebound()
	if rb == nil || rb.GetPersonId() != ana.ID || !rb.GetSubjectChanged() || rb.GetReason() != "the IdP moved" ||
		len(rb.GetOldIssuerHmac()) != 32 || bytes.Equal(rb.GetOldIssuerHmac(), rb.GetNewIssuerHmac()) ||
		audit.GetHeader().GetActor().GetId() != "operator" {
		t.Fatalf("audit event %v", audit)
	}
}

// Finding 11: after erasure no stream and no bucket holds the person's
// address, issuer or subject; the person's tokens are void, and the address
// can be bound again (a new person).
func TestErasureLeavesNoMapping(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	s := e.open(t)
	reader := e.open(t) // another replica, with the person cached
	ctx := ctxT(t)
	const issuer, subj, address = "http://127.0.0.1:47123", "subject-ana-9c1d", "ana.erased@example.org"
	ana, err := s.BindPerson(ctx, tenant, issuer, subj, address, nil)
	if err != nil {
		t.Fatal(err)
	}
	bo := mustBind(t, s, "test-bo", "bo@example.org")
	testkit.Eventually(t, 5*time.Second, func() error { _, err := reader.Person(ctx, tenant, ana.ID); return err })
	pat, err := s.IssuePAT(ctx, PATSpec{Tenant: tenant, PersonID: ana.ID, Name: "p", TokenSHA256: HashSecret("t"), Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if all := e.allBytes(t); !bytes.Contains(all, []byte(ana.ID)) {
		t.Fatal("positive control: the person id is not in the scan")
	}

	// What the identity service's erasure does: the map, then the tombstone.
	if err := s.ErasePeople(ctx, tenant, ana.ID); err != nil {
		t.Fatal(err)
	}
	publishErasure(t, e, s, ana.ID)

	all := e.allBytes(t)
	for _, needle := range []string{address, issuer, subj, "ana.erased"} {
		if bytes.Contains(all, []byte(needle)) {
			t.Errorf("%q is still on a stream or in a bucket after erasure", needle)
		}
	}
	for _, st := range []*Store{s, reader} {
		testkit.Eventually(t, 5*time.Second, func() error {
			if _, err := st.Person(ctx, tenant, ana.ID); !errors.Is(err, ErrErased) {
				return errors.New("person still known")
			}
			return nil
		})
		if revoked, why := st.PATRevoked(tenant, pat.ID, time.Now()); !revoked || why != "person erased" {
			t.Errorf("PAT after erasure: %v %q", revoked, why)
		}
	}
	if _, err := s.IssuePAT(ctx, PATSpec{Tenant: tenant, PersonID: ana.ID, Name: "q", TokenSHA256: HashSecret("u"), Expires: time.Now().Add(time.Hour)}); !errors.Is(err, ErrNotFound) {
		t.Errorf("PAT for an erased person: %v", err)
	}
	if p, err := s.Person(ctx, tenant, bo.ID); err != nil || p.Address != "bo@example.org" {
		t.Fatalf("another person: %+v, %v", p, err)
	}
	again, err := s.BindPerson(ctx, tenant, issuer, subj, address, nil)
	if err != nil || again.ID == ana.ID {
		t.Fatalf("signing in again after erasure: %+v, %v", again, err)
	}
}

// publishErasure appends the erasure tombstone as the identity service
// does (DataKeyDestroyed on erasure.<person>).
func publishErasure(t *testing.T, e *rig, s *Store, personID string) {
	t.Helper()
	ev := s.newEvent(ctxT(t), "data_key_destroyed", tenant, personID, &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_OPERATOR, Id: "op"})
	ev.Body = &alpv1.Event_DataKeyDestroyed{DataKeyDestroyed: &alpv1.DataKeyDestroyed{Tenant: tenant, PersonId: personID}}
	seq, err := e.b.Publish(ctxT(t), subject(tenant, "erasure", personID), ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.f.WaitApplied(ctxT(t), seq.Sequence); err != nil {
		t.Fatal(err)
	}
}

// legacyBind publishes an earlier version's PersonBound: account and
// address in clear on idp.<hash>.
func legacyBind(t *testing.T, e *rig, s *Store, id, issuer, subj, address string, bound time.Time) {
	t.Helper()
	ev := s.newEvent(ctxT(t), "person_bound", tenant, id, personActor(id))
	ev.Body = &alpv1.Event_PersonBound{PersonBound: &alpv1.PersonBound{
		Tenant: tenant, PersonId: id, Issuer: issuer, Subject: subj, Address: address, Bound: timestamppb.New(bound)}}
	if _, err := e.b.Publish(ctxT(t), subject(tenant, "idp", accountToken(issuer, subj)), ev); err != nil {
		t.Fatal(err)
	}
}

// Migration: streams written by earlier versions hold plaintext bindings,
// some of them duplicates of one address (the bug of finding 10: a person
// per test IdP restart). The migration keeps the most recently bound one;
// the older persons' tokens stop working and their accounts cannot sign in.
func TestMigrateBindings(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	writer := e.open(t)
	now := time.Now()
	legacyBind(t, e, writer, "p_old1", "http://127.0.0.1:30001", "test-ana", "ana@example.org", now.Add(-2*time.Hour))
	legacyBind(t, e, writer, "p_old2", "http://127.0.0.1:30002", "test-ana", "ana@example.org", now.Add(-time.Hour))
	legacyBind(t, e, writer, "p_bo", "http://127.0.0.1:30002", "test-bo", "bo@example.org", now.Add(-time.Hour))
	s := e.open(t)
	ctx := ctxT(t)
	migrated, superseded, err := s.MigrateBindings(ctx)
	if err != nil || migrated != 2 || superseded != 1 {
		t.Fatalf("migrated %d, superseded %d, %v", migrated, superseded, err)
	}
	if m, sup, err := s.MigrateBindings(ctx); err != nil || m != 0 || sup != 1 {
		t.Fatalf("again: migrated %d, superseded %d, %v", m, sup, err)
	}
	if p, err := s.PersonByAddress(ctx, tenant, "ana@example.org"); err != nil || p.ID != "p_old2" || p.Issuer != "http://127.0.0.1:30002" {
		t.Fatalf("ana: %+v, %v", p, err)
	}
	if _, err := s.Person(ctx, tenant, "p_old1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("superseded person still resolves: %v", err)
	}
	if _, err := s.BindPerson(ctx, tenant, "http://127.0.0.1:30001", "test-ana", "ana@example.org", nil); !errors.Is(err, ErrAddressTaken) {
		t.Fatalf("superseded account signs in: %v", err)
	}
	if p, err := s.BindPerson(ctx, tenant, "http://127.0.0.1:30002", "test-bo", "bo@example.org", nil); err != nil || p.ID != "p_bo" {
		t.Fatalf("migrated bo signs in: %+v, %v", p, err)
	}
	// Erasing a migrated person purges the map; the old event stays (the
	// identity stream is not rewritten), and the projection marks them.
	if err := s.ErasePeople(ctx, tenant, "p_bo"); err != nil {
		t.Fatal(err)
	}
	publishErasure(t, e, s, "p_bo")
	if _, err := s.PersonBySubject(ctx, tenant, "http://127.0.0.1:30002", "test-bo"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("erased migrated person: %v", err)
	}
	reopened := e.open(t)
	if _, err := reopened.Person(ctx, tenant, "p_bo"); !errors.Is(err, ErrErased) {
		t.Fatalf("after a restart: %v", err)
	}
	if n, _, err := reopened.MigrateBindings(ctx); err != nil || n != 0 {
		t.Fatalf("an erased person migrated again: %d, %v", n, err)
	}
}

// Sessions revoked by an operator: sessions issued until then are void,
// later ones are fine.
func TestRevokePersonSessions(t *testing.T) {
	t.Parallel()
	e := newRig(t)
	s := e.open(t)
	ctx := ctxT(t)
	ana := mustBind(t, s, "test-ana", "ana@example.org")
	issued := time.Now().Add(-time.Minute)
	if err := s.SessionValid(tenant, ana.ID, issued); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokePersonSessions(ctx, tenant, ana.ID, "laptop stolen"); err != nil {
		t.Fatal(err)
	}
	if err := s.SessionValid(tenant, ana.ID, issued); !errors.Is(err, ErrRevoked) {
		t.Fatalf("session issued before the revocation: %v", err)
	}
	if err := s.SessionValid(tenant, ana.ID, time.Now().Add(time.Second)); err != nil {
		t.Fatalf("session issued after: %v", err)
	}
	if err := s.SessionValid(tenant, "p_nobody", issued); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown person: %v", err)
	}
	if k := e.kinds(t); k["person_sessions_revoked"] != 1 {
		t.Fatalf("events %v", k)
	}
}
