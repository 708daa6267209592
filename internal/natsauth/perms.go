package natsauth

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/streams"
)

// Permissions are one NATS user's allow-lists; everything else is denied.
type Permissions struct {
	Publish   []string
	Subscribe []string
	// AllowResponses lets the user answer a request it received (one
	// reply within two minutes, nats-server's allow_responses: true),
	// whatever the request's reply subject. The probe responders need it;
	// they must answer only requests whose reply subject is an inbox of
	// their broker ([IsInbox]), or a peer could make them publish a reply
	// on any subject once.
	AllowResponses bool
}

// rule is one allowed subject and why the role needs it.
type rule struct {
	Subject string
	Why     string
}

// JetStream API prefixes (nats.go jetstream, default domain).
const (
	jsAPI = "$JS.API."
	jsAck = "$JS.ACK."
	kvPre = "$KV."
)

// InboxPrefix is the reply-subject prefix of role's connections in broker
// namespace ns: _INBOX_<ns>_<role>. Each role subscribes only below its
// own prefix, so no role can read another's replies (JetStream API
// answers, pulled messages); the client must use nats.CustomInboxPrefix
// with it ([ClientOptions] does).
func InboxPrefix(ns, role string) string { return "_INBOX_" + ns + "_" + role }

// IsInbox reports whether subject is a reply subject of some role of
// broker namespace ns (below an [InboxPrefix]). A probe responder checks
// it before answering, so a request cannot steer its reply elsewhere.
func IsInbox(ns, subject string) bool {
	for _, r := range Roles() {
		if strings.HasPrefix(subject, InboxPrefix(ns, envelope.ServiceName(r))+".") {
			return true
		}
	}
	return false
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

func checkName(ns string) error {
	if !nameRE.MatchString(ns) {
		return fmt.Errorf("natsauth: broker name %q must be 1 to 32 characters of A-Z, a-z, 0-9, _ and -", ns)
	}
	return nil
}

func checkTenants(tenants []string) error {
	if len(tenants) == 0 {
		return errors.New("natsauth: at least one tenant domain is required")
	}
	seen := map[string]bool{}
	for _, t := range tenants {
		if alp.ValidateTenant(t) != nil {
			return fmt.Errorf("natsauth: tenant %q is not a lowercase domain name", t)
		}
		if seen[t] {
			return fmt.Errorf("natsauth: tenant %q is listed twice", t)
		}
		seen[t] = true
	}
	return nil
}

// PermissionsFor renders role's allow-lists for the broker namespace ns (its
// name) hosting tenants.
func PermissionsFor(ns string, tenants []string, role alpv1.Role) (Permissions, error) {
	if err := checkName(ns); err != nil {
		return Permissions{}, err
	}
	if err := checkTenants(tenants); err != nil {
		return Permissions{}, err
	}
	pub, sub, ok := rules(ns, tenants, role)
	if !ok {
		return Permissions{}, fmt.Errorf("natsauth: %s is not a service role", role)
	}
	p := Permissions{AllowResponses: true}
	for _, r := range pub {
		p.Publish = append(p.Publish, r.Subject)
	}
	for _, r := range sub {
		p.Subscribe = append(p.Subscribe, r.Subject)
	}
	return p, nil
}

// rules lists role's publish and subscribe allow-lists with the reason for
// each subject. It does not validate ns and tenants, so the documentation
// can render it with placeholders.
func rules(ns string, tenants []string, role alpv1.Role) (pub, sub []rule, ok bool) {
	u, ok := UseOf(role)
	if !ok {
		return nil, nil, false
	}
	name := envelope.ServiceName(role)
	seen := map[string]bool{}
	allow := func(list *[]rule, why, format string, args ...any) {
		s := fmt.Sprintf(format, args...)
		if !seen[s] {
			seen[s] = true
			*list = append(*list, rule{s, why})
		}
	}
	NS := func(n string) string { return bus.StreamName(ns, n) }

	for _, kind := range u.Publishes {
		for _, t := range tenants {
			allow(&pub, "publish its events", "%s", streams.TenantFilter(kind, t))
		}
	}
	readsOwn := false
	for _, s := range u.Owns {
		st := NS(s)
		for _, op := range []string{"INFO", "CREATE", "UPDATE"} {
			allow(&pub, "own stream: look up, create, update (bus.EnsureStream)", "%sSTREAM.%s.%s", jsAPI, op, st)
		}
		def, _ := streams.ByName(s)
		if def.Kind != "" {
			allow(&pub, "own stream: last message on a subject (bus.Append, direct get)", "%sDIRECT.GET.%s.>", jsAPI, st)
			readsOwn = true
		}
		if def.PurgedOnErasure {
			allow(&pub, "own stream: purge an erased person's subjects", "%sSTREAM.PURGE.%s", jsAPI, st)
		}
	}
	if readsOwn {
		allow(&pub, "find a subject's stream (bus.Append: StreamNameBySubject)", "%sSTREAM.NAMES", jsAPI)
	}
	for _, c := range u.Consumers {
		st, cn := NS(c.Stream), NS(c.Durable)
		why := "consumer `" + cn + "` (bus.Consume)"
		allow(&pub, why+": create or update", "%sCONSUMER.CREATE.%s.%s", jsAPI, st, cn)
		allow(&pub, why+": create or update with one filter subject", "%sCONSUMER.CREATE.%s.%s.>", jsAPI, st, cn)
		allow(&pub, why+": info (watchdog, lag)", "%sCONSUMER.INFO.%s.%s", jsAPI, st, cn)
		allow(&pub, why+": pull", "%sCONSUMER.MSG.NEXT.%s.%s", jsAPI, st, cn)
		allow(&pub, why+": ack, nak, term", "%s%s.%s.>", jsAck, st, cn)
		allow(&pub, why+": its dead letters", "%s", bus.DeadLetterSubjectIn(ns, c.Durable))
	}
	for _, r := range u.Reads {
		st := NS(r)
		why := "reader of `" + st + "` (ephemeral ordered consumer)"
		// The ephemeral form of the create API (no consumer name in the
		// subject): the server refuses a durable there, and removes the
		// reader once it stops pulling. Readers cannot delete consumers.
		allow(&pub, why+": create an ephemeral ordered reader", "%sCONSUMER.CREATE.%s", jsAPI, st)
		allow(&pub, why+": look its reader up", "%sCONSUMER.INFO.%s.*", jsAPI, st)
		allow(&pub, why+": pull", "%sCONSUMER.MSG.NEXT.%s.*", jsAPI, st)
		allow(&pub, why+": last message on a subject (direct get)", "%sDIRECT.GET.%s.>", jsAPI, st)
	}
	for _, g := range u.Gets {
		allow(&pub, "reads single subjects of `"+NS(g)+"`: last message on a subject (direct get)", "%sDIRECT.GET.%s.>", jsAPI, NS(g))
	}
	for _, a := range u.Awaits {
		def, _ := streams.ByName(a)
		why := "await answers on `" + NS(a) + "`"
		allow(&pub, why+": last message on a subject (direct get)", "%sDIRECT.GET.%s.>", jsAPI, NS(a))
		for _, t := range tenants {
			allow(&sub, why+": core subscription to per-envelope subjects", "%s", streams.TenantFilter(def.Kind, t))
		}
	}
	for _, r := range u.BatchReads {
		allow(&pub, "own stream: read a subject's messages in batches (batched direct get)", "%sDIRECT.GET.%s", jsAPI, NS(r))
	}
	for _, s := range u.Shared {
		st := NS(s)
		for _, op := range []string{"INFO", "CREATE", "UPDATE"} {
			allow(&pub, "shared dead-letter stream: look up, create, update (bus.EnsureShared)", "%sSTREAM.%s.%s", jsAPI, op, st)
		}
	}
	for _, b := range u.Buckets {
		bn := NS(b.Name)
		stream := "KV_" + bn
		var keys []string
		switch b.Keys {
		case Tenants:
			for _, t := range tenants {
				keys = append(keys, t+".*")
			}
		case AllKeys:
			keys = append(keys, ">")
		}
		if b.Access.Has(Manage) {
			allow(&pub, "JetStream account info (CreateOrUpdateKeyValue)", "%sINFO", jsAPI)
			for _, op := range []string{"CREATE", "UPDATE"} {
				allow(&pub, "bucket `"+bn+"`: create, update (CreateOrUpdateKeyValue)", "%sSTREAM.%s.%s", jsAPI, op, stream)
			}
		}
		if b.Access.Has(Read) {
			for _, k := range keys {
				allow(&pub, "bucket `"+bn+"`: get (direct get)", "%sDIRECT.GET.%s.%s%s.%s", jsAPI, stream, kvPre, bn, k)
			}
		}
		if b.Access.Has(Write) {
			for _, k := range keys {
				allow(&pub, "bucket `"+bn+"`: create, put, purge", "%s%s.%s", kvPre, bn, k)
			}
		}
		if b.Access.Has(Purge) {
			allow(&pub, "bucket `"+bn+"`: drop keys without a purge marker (stream purge by subject)", "%sSTREAM.PURGE.%s", jsAPI, stream)
		}
	}
	allow(&pub, "probe any service (core request/reply)", "%s", streams.ProbeSubject(ns, "*"))

	allow(&sub, "its own replies: JetStream API answers, pulled messages, probe answers", "%s.>", InboxPrefix(ns, name))
	allow(&sub, "answer probes", "%s", streams.ProbeSubject(ns, name))
	return pub, sub, true
}
