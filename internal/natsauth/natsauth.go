// Package natsauth says which NATS subjects each alpd service role may
// publish and subscribe to, and turns that into nats-server configuration:
// one NATS user per role, authenticated by an nkey, with publish and
// subscribe allow-lists (ARCHITECTURE.md §4, "Trust boundaries inside a
// broker").
//
// [Table] is the one table of what every role does on NATS. It is derived
// from internal/streams (a stream's owner publishes its subjects and
// creates, updates and reads its stream; its consumers table names each
// role's durable consumers) plus the pieces every consumer
// shares (the dead-letter stream) and the data-key
// bucket of the roles that seal, open or erase bodies. [PermissionsFor]
// renders one role's allow-lists for a broker namespace and its tenants,
// naming exactly the JetStream API subjects the nats.go jetstream code
// paths used by internal/bus and internal/seal need. [ServerConfig] writes a
// nats-server configuration for shared isolation (one account for the
// broker) or hard isolation (one account per tenant, each tenant with its
// own broker namespace); [ClientOptions] are the matching client options.
//
// docs/nats-permissions.md renders the same table; a test keeps it current
// (ALPD_UPDATE_DOCS=1 rewrites it).
//
// What permissions cannot say: a role that may create or update a stream or
// bucket may set any of its configuration (NATS checks the API subject,
// not the request body), and a publisher may set any header. Consumers
// therefore still check an event's producer role against the subject
// (streams.CheckProducer): the subject proves who published it because
// only the owner role may publish there.
package natsauth

import (
	"slices"
	"strings"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/streams"
)

// Names of the KV buckets (without the broker namespace prefix).
const (
	// DataKeysBucket holds the wrapped per-person data keys (internal/seal);
	// the broker creates it as <NS>_DATAKEYS.
	DataKeysBucket = "datakeys"
	// OAuthCodesBucket holds identity's one-time authorization codes and
	// used client-assertion ids (services/identity/oauthas), keyed by hashes.
	OAuthCodesBucket = "oauthcodes"
	// LedgerSecretsBucket holds the ledger's per-person secrets (salts and
	// openings of commitments), wrapped, keyed "<tenant domain>.<person>";
	// purged on erasure.
	LedgerSecretsBucket = "ledgersecrets"
	// LedgerTreesBucket caches the ledger's per-person tree tiles
	// (rebuildable from the ledger stream).
	LedgerTreesBucket = "ledgertrees"
	// LedgerCheckpointsBucket holds the latest signed checkpoint per log.
	LedgerCheckpointsBucket = "ledgercheckpoints"
	// PersonMapBucket is the erasable map person id ↔ address and IdP
	// account (internal/personmap), keyed "<tenant domain>.<token>";
	// identity writes it and purges a person's keys on erasure, the roles
	// that follow the identity projection read it.
	PersonMapBucket = "personmap"
	// SessionsBucket holds people's web sessions (internal/signin), keyed
	// "<tenant domain>.<hash of the session id>"; identity only.
	SessionsBucket = "sessions"
)

// Access is what a role may do with a KV bucket.
type Access uint8

const (
	// Manage: create the bucket or update its configuration
	// (CreateOrUpdateKeyValue at start-up).
	Manage Access = 1 << iota
	// Read: get a key's value (direct get).
	Read
	// Write: create, put and purge keys.
	Write
	// Purge: remove a key's messages from the bucket's stream without
	// leaving a purge marker (a stream purge filtered by the key's
	// subject): the person map drops keys whose name is a keyed hash.
	Purge
)

// Has reports whether a includes all of b.
func (a Access) Has(b Access) bool { return a&b == b }

func (a Access) String() string {
	var parts []string
	for _, p := range []struct {
		a    Access
		name string
	}{{Manage, "manage"}, {Read, "read"}, {Write, "write"}, {Purge, "purge"}} {
		if a.Has(p.a) {
			parts = append(parts, p.name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// KeyScope restricts the keys of a bucket a role may read or write.
type KeyScope uint8

const (
	// Tenants: keys of the broker's tenants (data keys are keyed
	// "<tenant domain>.<person id>").
	Tenants KeyScope = iota + 1
	// AllKeys: every key (a bucket only its owner role uses).
	AllKeys
)

// Bucket is a role's use of one KV bucket.
type Bucket struct {
	// Name without namespace; the bucket is <NS>_<NAME>, its stream KV_<NS>_<NAME>.
	Name   string
	Access Access
	Keys   KeyScope
	Why    string
}

// Use is everything one role does on NATS.
type Use struct {
	Role alpv1.Role
	// Owns are the streams (from streams.Table) the role creates, updates
	// and reads, by name without namespace.
	Owns []string
	// Publishes are the subject kinds the role publishes events on:
	// alp.<kind>.<tenant token>.> for every tenant of the broker.
	Publishes []string
	// Consumes are the subject kinds whose events reach the role, through
	// its consumers (never a core subscription).
	Consumes []string
	// Consumers are the role's durable consumers (streams.Consumers).
	Consumers []streams.Consumer
	// Reads are the streams (by name without namespace) the role follows
	// with ephemeral ordered readers to build a projection
	// (internal/identitystore): it may create ephemeral consumers on them,
	// look them up, pull from them and get the last message of a subject,
	// nothing else.
	Reads []string
	// Awaits are the streams (by name without namespace) on whose
	// per-envelope subjects the role waits for an answer: a core
	// subscription to the tenants' subjects of the stream's kind (the
	// answer may be missed, so it also reads the last message of a subject
	// directly). Ingress awaits policy's decisions this way.
	Awaits []string
	// Gets are streams the role only reads the last message of a subject
	// of (a direct get), nothing else: ingress answers an envelope's
	// delivery status from federation's log this way.
	Gets []string
	// BatchReads are streams the role owns and reads a subject of in
	// batches (batched direct gets by sequence or time): the ledger reads
	// persons' logs this way.
	BatchReads []string
	// Shared are streams every consumer of the broker creates and
	// publishes to (the dead-letter stream), by name without namespace.
	Shared []string
	// Buckets are the KV buckets the role uses.
	Buckets []Bucket
}

// batchReaders lists the owned streams a role reads in batches.
var batchReaders = map[alpv1.Role][]string{
	alpv1.Role_ROLE_LEDGER: {streams.Ledger},
}

// readers lists the roles that keep a projection of a stream they do not
// consume through a durable consumer. The identity state
// (internal/identitystore) is followed by identity itself (its commands
// wait for their own events), by ingress (token revocation checks, fail
// closed when stale), by approvals (people signing in to decide) and by the
// ledger (people and agents reading their ledger, same checks as ingress)
// and by policy (resolving recipients' addresses and people's roles, and
// checking the tokens of agents reading and tightening their person's
// rules where ingress does not run in the same process).
// Policy follows its own state (services/policy/relationships: every
// replica keeps the relationships fresh, and is not ready while stale; and
// internal/msgtypes/typestore, the organizations' message types on the
// same stream's type subjects). Ingress follows those type subjects too
// (typestore, to validate bodies at the door). Its reader filters on them
// alone (streams.PolicyTypeFilter), but the grant cannot say so: a
// projection's reader is created through the ephemeral form of the
// consumer API, whose filter is in the request, not the subject NATS
// checks — so ingress may read the whole policy stream (relationships and
// rule sets included), as policy may.
var readers = map[alpv1.Role][]string{
	// Policy also follows the standing rules people create on the
	// approvals page ("approve always"), which its decisions apply.
	alpv1.Role_ROLE_POLICY:   {streams.Policy, streams.Identity, streams.Approvals},
	alpv1.Role_ROLE_IDENTITY: {streams.Identity},
	alpv1.Role_ROLE_INGRESS:  {streams.Identity, streams.Policy, streams.Inbox},
	// Approvals also follows its own items (every replica serves the
	// pages from them) and policy's connections (a request answered on
	// the connections page leaves nothing to approve).
	alpv1.Role_ROLE_APPROVALS: {streams.Identity, streams.Approvals, streams.Policy},
	alpv1.Role_ROLE_LEDGER:    {streams.Identity},
	// Federation resolves an arriving envelope's recipient to the person
	// whose data key seals it.
	alpv1.Role_ROLE_FEDERATION: {streams.Identity},
}

// awaiters lists, by role, the streams whose per-envelope answers the role
// waits for (see Use.Awaits).
var awaiters = map[alpv1.Role][]string{
	alpv1.Role_ROLE_INGRESS: {streams.Decided},
}

// getters lists, by role, the streams it reads single subjects' last
// messages of (see Use.Gets).
var getters = map[alpv1.Role][]string{
	// Ingress reads an envelope's delivery status (federation's) and the
	// person's decision on what was held of it (approvals').
	alpv1.Role_ROLE_INGRESS: {streams.Inbound, streams.Approvals},
}

// dataKeyAccess is what the roles that seal, open or erase message bodies
// may do with the data-key bucket. Ingress seals (creates keys), identity
// erases (purges keys), policy opens bodies to decide on fields and seals
// what crosses for the recipient (creating a recipient's key on first
// use), the ledger opens them to commit to their digest (reads), federation
// opens what crosses to sign it and seals what arrives for its recipient,
// approvals opens what is held to show it to the person.
var dataKeyAccess = map[alpv1.Role]Access{
	alpv1.Role_ROLE_INGRESS:    Manage | Read | Write,
	alpv1.Role_ROLE_IDENTITY:   Manage | Read | Write,
	alpv1.Role_ROLE_POLICY:     Manage | Read | Write,
	alpv1.Role_ROLE_LEDGER:     Manage | Read,
	alpv1.Role_ROLE_FEDERATION: Manage | Read | Write,
	// Approvals opens the held values to show them to their person.
	alpv1.Role_ROLE_APPROVALS: Manage | Read,
}

// UsesDataKeys reports whether role seals, opens or erases bodies, and so
// needs the data-key bucket. The broker creates the bucket (and a Sealer)
// only for such roles; the others' NATS users may not touch it.
func UsesDataKeys(role alpv1.Role) bool {
	_, ok := dataKeyAccess[role]
	return ok
}

// Roles are the six service roles, in the order a message meets them.
func Roles() []alpv1.Role { return envelope.Roles() }

// Table lists what every service role does on NATS, in the order of Roles.
func Table() []Use {
	var out []Use
	for _, role := range Roles() {
		out = append(out, useOf(role))
	}
	return out
}

// UseOf is the table's entry for role; false for a role that is not a
// service.
func UseOf(role alpv1.Role) (Use, bool) {
	if !slices.Contains(Roles(), role) {
		return Use{}, false
	}
	return useOf(role), true
}

func useOf(role alpv1.Role) Use {
	u := Use{Role: role, Consumers: streams.OwnedConsumers(role, 0), Reads: slices.Clone(readers[role]), Awaits: slices.Clone(awaiters[role]),
		Gets: slices.Clone(getters[role]), BatchReads: slices.Clone(batchReaders[role])}
	for _, s := range streams.Table() {
		if s.Owner != role {
			continue
		}
		u.Owns = append(u.Owns, s.Name)
		if s.Kind != "" {
			u.Publishes = append(u.Publishes, s.Kind)
		}
	}
	for _, c := range u.Consumers {
		s, _ := streams.ByName(c.Stream)
		kinds := []string{s.Kind}
		if s.Kind == "" {
			kinds = nil
			for _, src := range s.Sources {
				if from, ok := streams.ByName(src.Stream); ok && from.Kind != "" {
					kinds = append(kinds, from.Kind)
				}
			}
			slices.Sort(kinds) // as the documentation lists them
		}
		for _, k := range kinds {
			if !slices.Contains(u.Consumes, k) {
				u.Consumes = append(u.Consumes, k)
			}
		}
	}
	for _, r := range u.Reads {
		if s, _ := streams.ByName(r); s.Kind != "" && !slices.Contains(u.Consumes, s.Kind) {
			u.Consumes = append(u.Consumes, s.Kind)
		}
	}
	if len(u.Consumers) > 0 {
		u.Shared = []string{bus.DeadLetterStream}
	}
	if a, ok := dataKeyAccess[role]; ok {
		why := map[alpv1.Role]string{
			alpv1.Role_ROLE_INGRESS:   "seals bodies (creates data keys)",
			alpv1.Role_ROLE_IDENTITY:  "erases persons (purges data keys)",
			alpv1.Role_ROLE_POLICY:    "opens bodies",
			alpv1.Role_ROLE_LEDGER:    "opens bodies (to commit to their digest)",
			alpv1.Role_ROLE_APPROVALS: "opens held values (to show them to their person)",
		}[role]
		u.Buckets = append(u.Buckets, Bucket{Name: DataKeysBucket, Access: a, Keys: Tenants, Why: why})
	}
	if role == alpv1.Role_ROLE_LEDGER {
		u.Buckets = append(u.Buckets,
			Bucket{Name: LedgerSecretsBucket, Access: Manage | Read | Write, Keys: Tenants,
				Why: "ledger secrets: creates them, reads them, purges them on erasure"},
			Bucket{Name: LedgerTreesBucket, Access: Manage | Read | Write, Keys: AllKeys,
				Why: "ledger tree tiles (a cache of the ledger stream)"},
			Bucket{Name: LedgerCheckpointsBucket, Access: Manage | Read | Write, Keys: AllKeys,
				Why: "the latest signed checkpoint of each log"})
	}
	if role == alpv1.Role_ROLE_IDENTITY {
		u.Buckets = append(u.Buckets, Bucket{Name: OAuthCodesBucket, Access: Manage | Read | Write, Keys: AllKeys,
			Why: "OAuth authorization codes and client-assertion ids (one-time use)"},
			Bucket{Name: SessionsBucket, Access: Manage | Read | Write, Keys: Tenants,
				Why: "people's web sessions: created at sign-in, checked on every use, deleted at sign-out"})
	}
	if slices.Contains(u.Reads, streams.Identity) {
		// Every role following the identity projection resolves person ids
		// to addresses; only identity binds and erases.
		b := Bucket{Name: PersonMapBucket, Access: Manage | Read, Keys: Tenants, Why: "person map: resolves person ids to addresses"}
		if role == alpv1.Role_ROLE_IDENTITY {
			b.Access, b.Why = Manage|Read|Write|Purge, "person map: binds people, one per address; purges them on erasure"
		}
		u.Buckets = append(u.Buckets, b)
	}
	return u
}
