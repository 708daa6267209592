package streams

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

func event(kind string, role alpv1.Role) *alpv1.Event {
	ev := &alpv1.Event{Header: &alpv1.EventHeader{Type: kind, ProducerRole: role}}
	switch kind {
	case "send_requested":
		ev.Body = &alpv1.Event_SendRequested{SendRequested: &alpv1.SendRequested{}}
	case "decided":
		ev.Body = &alpv1.Event_Decided{Decided: &alpv1.Decided{}}
	case "key_lifecycle":
		ev.Body = &alpv1.Event_KeyLifecycle{KeyLifecycle: &alpv1.KeyLifecycle{}}
	case "grant_revoked":
		ev.Body = &alpv1.Event_GrantRevoked{GrantRevoked: &alpv1.GrantRevoked{}}
	}
	return ev
}

func TestCheckProducer(t *testing.T) {
	cases := []struct {
		subject string
		kind    string
		role    alpv1.Role
		want    string // "" = allowed, else part of the error
	}{
		{"alp.send.example_org.p1", "send_requested", alpv1.Role_ROLE_INGRESS, ""},
		{"alp.decided.example_org.p1", "decided", alpv1.Role_ROLE_POLICY, ""},
		{"alp.identity.example_org.keys.k1", "key_lifecycle", alpv1.Role_ROLE_IDENTITY, ""},
		{"alp.identity.example_org.grant.g1", "grant_revoked", alpv1.Role_ROLE_IDENTITY, ""},
		// Ingress may not revoke grants, even if it could publish there.
		{"alp.identity.example_org.grant.g1", "grant_revoked", alpv1.Role_ROLE_INGRESS, "only ROLE_IDENTITY"},
		// Policy claims to be ingress on ingress's subject (it cannot publish
		// there, and if it could the claim would still not match the owner).
		{"alp.send.example_org.p1", "send_requested", alpv1.Role_ROLE_POLICY, "only ROLE_INGRESS"},
		// Policy puts a kind it may not produce on its own subject.
		{"alp.decided.example_org.p1", "send_requested", alpv1.Role_ROLE_POLICY, "may not publish send_requested"},
		{"alp.decided.example_org.p1", "key_lifecycle", alpv1.Role_ROLE_POLICY, "may not publish key_lifecycle"},
		{"alp.unknown.example_org.p1", "decided", alpv1.Role_ROLE_POLICY, "no stream"},
		{"other.send.x", "send_requested", alpv1.Role_ROLE_INGRESS, "not an alp subject"},
	}
	for _, c := range cases {
		err := CheckProducer(c.subject, event(c.kind, c.role))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s %s by %s: refused: %v", c.subject, c.kind, c.role, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s %s by %s: %v, want error with %q", c.subject, c.kind, c.role, err, c.want)
		}
	}
}

func TestTableIsConsistent(t *testing.T) {
	names := map[string]bool{}
	kinds := map[string]bool{}
	for _, s := range Table() {
		if names[s.Name] {
			t.Errorf("stream %s twice", s.Name)
		}
		names[s.Name] = true
		if s.Kind != "" {
			if kinds[s.Kind] {
				t.Errorf("subject kind %s owned twice", s.Kind)
			}
			kinds[s.Kind] = true
		}
		for _, src := range s.Sources {
			if _, ok := ByName(src.Stream); !ok {
				t.Errorf("%s sources unknown stream %s", s.Name, src.Stream)
			}
		}
		spec := s.Spec([]string{"a.example", "b.example"}, Limits{EventMaxAge: 1, WorkMaxAge: 2})
		if s.Kind != "" && len(spec.Subjects) != 2 {
			t.Errorf("%s: subjects %v", s.Name, spec.Subjects)
		}
		if s.AppendOnly && (!spec.DenyDelete || !spec.DenyPurge) {
			t.Errorf("%s is append-only without deny flags", s.Name)
		}
	}
}

// TestEventKindsAreBodies: every kind a stream carries is a body of
// alp.v1.Event (a typo would make CheckProducer refuse every such event).
func TestEventKindsAreBodies(t *testing.T) {
	body := (&alpv1.Event{}).ProtoReflect().Descriptor().Oneofs().ByName("body")
	for _, s := range Table() {
		for _, k := range s.EventKinds {
			if fd := body.Fields().ByName(protoreflect.Name(k)); fd == nil {
				t.Errorf("stream %s carries %q, which is not a body of alp.v1.Event", s.Name, k)
			}
		}
	}
	identity, _ := ByName(Identity)
	for _, k := range []string{"person_bound", "person_updated", "person_agents_revoked", "client_registered",
		"vendor_attestation_bound", "grant_issued", "refresh_token_rotated", "grant_revoked",
		"personal_access_token_issued", "personal_access_token_revoked"} {
		if !slices.Contains(identity.EventKinds, k) {
			t.Errorf("the identity stream does not carry %s", k)
		}
	}
}
