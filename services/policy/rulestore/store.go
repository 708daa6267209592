package rulestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/projection"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/policy/rules"
)

// maxAttempts bounds a Put's append rounds when the subject moved under it
// without the set's version moving (a refused foreign event).
const maxAttempts = 5

// DefaultCacheSize is how many compiled sets a store keeps when Open is
// given none: one per active person and party is plenty, the template's
// shared by everyone on it.
const DefaultCacheSize = 4096

// CodeVersionConflict is the machine-readable code of a ConflictError.
const CodeVersionConflict = "version_conflict"

var (
	// ErrInvalid: a call's input failed validation; the message names the
	// field.
	ErrInvalid = errors.New("rulestore: invalid")
	// ErrNotHosted: the tenant is not one of this store's.
	ErrNotHosted = errors.New("rulestore: tenant not hosted")
	// ErrVersionConflict: the writer's expected version is not the set's
	// current one (a *ConflictError says which is).
	ErrVersionConflict = errors.New("rulestore: " + CodeVersionConflict)
)

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
}

// ConflictError refuses a write that named a version other than the
// set's current one: someone else wrote in between. The writer reloads
// (Current answers the version) and decides again.
type ConflictError struct {
	Party    rules.Party `json:"party"`
	Owner    string      `json:"owner"`
	Expected uint64      `json:"expected"`
	Current  uint64      `json:"current"`
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("rulestore: %s: %s set of %s is at version %d, the write expected %d",
		CodeVersionConflict, e.Party, e.Owner, e.Current, e.Expected)
}

// Code is CodeVersionConflict.
func (e *ConflictError) Code() string { return CodeVersionConflict }

// Is makes errors.Is(err, ErrVersionConflict) hold.
func (e *ConflictError) Is(target error) bool { return target == ErrVersionConflict }

// Writer is the kind of credential a write comes with. The caller
// authenticates and authorizes it; the store enforces what each kind may
// do to which party's set.
type Writer int

// Writers.
const (
	// ByAdmin: an admin of the tenant; organization sets only.
	ByAdmin Writer = iota + 1
	// ByOperator: the broker's operator; any set.
	ByOperator
	// ByPerson: the owner in their web session; their own sets only.
	ByPerson
	// ByAgent: an agent token of the owner; their own sets, tightening
	// only.
	ByAgent
)

func (w Writer) String() string {
	switch w {
	case ByAdmin:
		return "admin"
	case ByOperator:
		return "operator"
	case ByPerson:
		return "person"
	case ByAgent:
		return "agent"
	}
	return fmt.Sprintf("writer(%d)", int(w))
}

func (w Writer) proto() alpv1.RuleSetWriter {
	switch w {
	case ByAdmin:
		return alpv1.RuleSetWriter_RULE_SET_WRITER_ADMIN
	case ByOperator:
		return alpv1.RuleSetWriter_RULE_SET_WRITER_OPERATOR
	case ByPerson:
		return alpv1.RuleSetWriter_RULE_SET_WRITER_PERSON
	case ByAgent:
		return alpv1.RuleSetWriter_RULE_SET_WRITER_AGENT
	}
	return alpv1.RuleSetWriter_RULE_SET_WRITER_UNSPECIFIED
}

func writerOf(w alpv1.RuleSetWriter) Writer {
	switch w {
	case alpv1.RuleSetWriter_RULE_SET_WRITER_ADMIN:
		return ByAdmin
	case alpv1.RuleSetWriter_RULE_SET_WRITER_OPERATOR:
		return ByOperator
	case alpv1.RuleSetWriter_RULE_SET_WRITER_PERSON:
		return ByPerson
	case alpv1.RuleSetWriter_RULE_SET_WRITER_AGENT:
		return ByAgent
	}
	return 0
}

// Author is who writes: the kind of credential and the id the event's
// actor names (admin's or operator's id, the person id, or the agent's
// client id).
type Author struct {
	Writer Writer
	ID     string
}

func (a Author) actor() *alpv1.Actor {
	kind := alpv1.ActorKind_ACTOR_KIND_PERSON
	switch a.Writer {
	case ByOperator:
		kind = alpv1.ActorKind_ACTOR_KIND_OPERATOR
	case ByAgent:
		kind = alpv1.ActorKind_ACTOR_KIND_AGENT
	}
	return &alpv1.Actor{Kind: kind, Id: a.ID}
}

// orgParty reports whether party's sets belong to the organization.
func orgParty(p rules.Party) bool {
	return p == rules.PartySenderOrg || p == rules.PartyRecipientOrg
}

var partyProto = map[rules.Party]alpv1.RuleParty{
	rules.PartySender:       alpv1.RuleParty_RULE_PARTY_SENDER,
	rules.PartySenderOrg:    alpv1.RuleParty_RULE_PARTY_SENDER_ORG,
	rules.PartyRecipientOrg: alpv1.RuleParty_RULE_PARTY_RECIPIENT_ORG,
	rules.PartyRecipient:    alpv1.RuleParty_RULE_PARTY_RECIPIENT,
}

func partyOf(p alpv1.RuleParty) rules.Party {
	for k, v := range partyProto {
		if v == p {
			return k
		}
	}
	return ""
}

// Version is one stored version of a set.
type Version struct {
	Party   rules.Party
	Owner   string
	Version uint64 // 0: the template, never stored
	Text    []byte
	Digest  string // hex SHA-256 of Text
	By      Writer // 0 for the template
	Actor   string
	Stored  time.Time
	// TighteningOnly: the version only added forbids to the one before.
	TighteningOnly bool
}

type key struct {
	party rules.Party
	owner string
}

// Store is a replica of the rule sets of some tenants. Safe for
// concurrent use.
type Store struct {
	b       *bus.Bus
	f       *projection.Follower
	engine  *rules.Engine
	cache   *rules.Cache
	log     *slog.Logger
	tenants map[string]map[key]*Version // guarded by f's lock

	// beforeCommit, in tests, runs before each append (to make another
	// writer win a race).
	beforeCommit func(subject string)
}

// Open builds the projection of tenants' rule sets from the policy stream
// of b's broker and keeps following it until Close. The stream must exist
// (the policy service creates it with its other streams). engine validates
// writes and compiles reads; cacheSize bounds the compiled sets kept
// (0: DefaultCacheSize).
func Open(ctx context.Context, b *bus.Bus, tenants []string, engine *rules.Engine, cacheSize int, log *slog.Logger) (*Store, error) {
	if b == nil {
		return nil, invalid("bus", "nil")
	}
	if engine == nil {
		return nil, invalid("engine", "nil")
	}
	if len(tenants) == 0 {
		return nil, invalid("tenants", "at least one is required")
	}
	if cacheSize <= 0 {
		cacheSize = DefaultCacheSize
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{b: b, engine: engine, cache: rules.NewCache(engine, cacheSize),
		log: log.With("component", "rulestore"), tenants: map[string]map[key]*Version{}}
	if err := alp.ValidateTenants(tenants); err != nil {
		return nil, invalid("tenants", "%v", err)
	}
	var filters []string
	for _, t := range tenants {
		s.tenants[t] = map[key]*Version{}
		filters = append(filters, streams.PolicyRulesFilter(t))
	}
	f, err := projection.Open(ctx, b, projection.Config{
		Stream: streams.Policy, Filters: filters, Apply: s.apply, Name: "rulestore", Log: s.log,
	})
	if err != nil {
		return nil, fmt.Errorf("rulestore: %w", err)
	}
	s.f = f
	return s, nil
}

// Close stops following the stream. Reads keep answering from the last
// state; Fresh and Put return projection.ErrClosed.
func (s *Store) Close() { s.f.Close() }

// Fresh returns nil only if the projection confirmed within maxStaleness
// that it had applied everything on the stream, projection.ErrStale
// otherwise: a replica is not ready, and must not decide, while it fails.
func (s *Store) Fresh(maxStaleness time.Duration) error { return s.f.Fresh(maxStaleness) }

// Applied is the stream sequence of the last event applied.
func (s *Store) Applied() uint64 { return s.f.Applied() }

// ownerToken is the subject token of a set's owner.
func ownerToken(party rules.Party, owner string) string {
	if orgParty(party) {
		return bus.TenantToken(owner)
	}
	return owner
}

// check validates tenant, party and owner and answers the set's subject.
func (s *Store) check(tenant string, party rules.Party, owner string) (map[key]*Version, string, error) {
	sets := s.tenants[tenant]
	if sets == nil {
		return nil, "", fmt.Errorf("%w: %q", ErrNotHosted, tenant)
	}
	if !party.Valid() {
		return nil, "", invalid("party", "unknown party %q", party)
	}
	if orgParty(party) {
		if owner != tenant {
			return nil, "", invalid("owner", "the owner of a %s set is the tenant %q, not %q", party, tenant, owner)
		}
	} else if err := alp.ValidatePersonID(owner); err != nil {
		return nil, "", invalid("owner", "%v", err)
	}
	subj, err := streams.PolicyRulesSubject(tenant, string(party), ownerToken(party, owner))
	if err != nil {
		return nil, "", invalid("owner", "%v", err)
	}
	return sets, subj, nil
}

// Get answers the current version of party's set of owner: the stored
// one, or the party's template as version 0.
func (s *Store) Get(tenant string, party rules.Party, owner string) (Version, error) {
	sets, _, err := s.check(tenant, party, owner)
	if err != nil {
		return Version{}, err
	}
	s.f.RLock()
	v := sets[key{party, owner}]
	s.f.RUnlock()
	if v != nil {
		return *v, nil
	}
	text, err := rules.Template(party)
	if err != nil {
		return Version{}, fmt.Errorf("rulestore: %w", err)
	}
	sum := sha256.Sum256(text)
	return Version{Party: party, Owner: owner, Text: text, Digest: hex.EncodeToString(sum[:])}, nil
}

// Current answers the compiled current set of party of owner and its
// version (0: the template). Each version is compiled once (rules.Cache);
// an error means a stored set no longer validates against the entity
// model, and the caller must fail closed.
func (s *Store) Current(tenant string, party rules.Party, owner string) (*rules.Compiled, uint64, error) {
	v, err := s.Get(tenant, party, owner)
	if err != nil {
		return nil, 0, err
	}
	c, err := s.cache.Get(party, v.Text)
	if err != nil {
		return nil, v.Version, fmt.Errorf("rulestore: %s set of %s version %d: %w", party, owner, v.Version, err)
	}
	return c, v.Version, nil
}

// Put stores text as the next version of party's set of owner, written by
// by, if expectVersion is the set's current version (0 before the first
// write). It answers the new version. Nothing is stored when it fails:
// invalid text is a *rules.ValidationError (codes of rules, line:column
// for parse errors), an agent's write that is not a tightening one too
// (loosening_refused), a stale expectVersion a *ConflictError
// (version_conflict).
func (s *Store) Put(ctx context.Context, tenant string, party rules.Party, owner string, text []byte, by Author, expectVersion uint64) (uint64, error) {
	if s.f.Closed() {
		return 0, projection.ErrClosed
	}
	sets, subj, err := s.check(tenant, party, owner)
	if err != nil {
		return 0, err
	}
	switch by.Writer {
	case ByAdmin:
		if !orgParty(party) {
			return 0, invalid("by", "an admin writes organization sets, not a person's %s set", party)
		}
	case ByPerson, ByAgent:
		if orgParty(party) {
			return 0, invalid("by", "a %s writes their own sets, not the organization's %s set", by.Writer, party)
		}
		if by.Writer == ByPerson && by.ID != owner {
			return 0, invalid("by", "person %q cannot write %q's set", by.ID, owner)
		}
	case ByOperator:
	default:
		return 0, invalid("by", "unknown writer %d", int(by.Writer))
	}
	if by.ID == "" || len(by.ID) > 128 {
		return 0, invalid("by", "the author's id must be 1 to 128 characters")
	}
	next, err := s.engine.Validate(party, text)
	if err != nil {
		return 0, err
	}
	caughtUp := false
	for attempt := 1; ; attempt++ {
		s.f.RLock()
		seq := s.f.Version(subj)
		cur := sets[key{party, owner}]
		s.f.RUnlock()
		var curVersion uint64
		if cur != nil {
			curVersion = cur.Version
		}
		if curVersion < expectVersion && !caughtUp {
			// The writer read a version this replica has not applied yet
			// (another replica wrote it): catch up with the subject once
			// before calling it stale.
			caughtUp = true
			if err := s.f.WaitSubject(ctx, subj); err != nil {
				return 0, fmt.Errorf("rulestore: put %s set of %s: catch up: %w", party, owner, err)
			}
			continue
		}
		if curVersion != expectVersion {
			return 0, &ConflictError{Party: party, Owner: owner, Expected: expectVersion, Current: curVersion}
		}
		tightening, err := s.tightening(party, owner, cur, next)
		if err != nil {
			return 0, err
		}
		if by.Writer == ByAgent && tightening != nil {
			return 0, tightening
		}
		ev := s.event(tenant, party, owner, curVersion+1, next, by, tightening == nil)
		if s.beforeCommit != nil {
			s.beforeCommit(subj)
		}
		at, err := s.b.Append(ctx, subj, seq, ev)
		if err == nil {
			if err := s.f.WaitApplied(ctx, at); err != nil {
				return 0, fmt.Errorf("rulestore: version %d stored at %d but not yet applied: %w", curVersion+1, at, err)
			}
			return curVersion + 1, nil
		}
		if !errors.Is(err, bus.ErrConflict) {
			return 0, fmt.Errorf("rulestore: put %s set of %s: %w", party, owner, err)
		}
		if attempt == maxAttempts {
			return 0, fmt.Errorf("rulestore: put %s set of %s: still conflicting after %d attempts: %w", party, owner, attempt, err)
		}
		// Someone else appended: once we have their event, the version
		// check above answers the conflict.
		if err := s.f.WaitSubject(ctx, subj); err != nil {
			return 0, fmt.Errorf("rulestore: put %s set of %s: reload after conflict: %w", party, owner, err)
		}
	}
}

// tightening answers nil if next only adds forbids to the current set
// (the stored version, or the template), else IsTightening's refusal.
func (s *Store) tightening(party rules.Party, owner string, cur *Version, next *rules.Set) (*rules.ValidationError, error) {
	var text []byte
	if cur != nil {
		text = cur.Text
	} else {
		t, err := rules.Template(party)
		if err != nil {
			return nil, fmt.Errorf("rulestore: %w", err)
		}
		text = t
	}
	prev, err := s.engine.Validate(party, text)
	if err != nil {
		// The current set no longer validates (the entity model changed):
		// nothing can be shown to only tighten it.
		return &rules.ValidationError{Party: party, Problems: []rules.Problem{{Code: rules.CodeLooseningRefused,
			Message: fmt.Sprintf("the current %s set of %s no longer validates: %v", party, owner, err)}}}, nil
	}
	if err := rules.IsTightening(prev, next); err != nil {
		var ve *rules.ValidationError
		if errors.As(err, &ve) {
			return ve, nil
		}
		return nil, fmt.Errorf("rulestore: %w", err)
	}
	return nil, nil
}

func (s *Store) event(tenant string, party rules.Party, owner string, version uint64, set *rules.Set, by Author, tighteningOnly bool) *alpv1.Event {
	return &alpv1.Event{
		Header: &alpv1.EventHeader{
			Type:          "rule_set_version_stored",
			SchemaVersion: 1,
			EventId:       uuid.Must(uuid.NewV7()).String(),
			CorrelationId: string(party) + "." + owner,
			Actor:         by.actor(),
			Tenant:        tenant,
			ProducerRole:  alpv1.Role_ROLE_POLICY,
			Occurred:      timestamppb.Now(),
		},
		Body: &alpv1.Event_RuleSetVersionStored{RuleSetVersionStored: &alpv1.RuleSetVersionStored{
			Tenant: tenant, Party: partyProto[party], Owner: owner, Version: version,
			Text: set.Text, Digest: set.Hash, By: by.Writer.proto(), TighteningOnly: tighteningOnly,
		}},
	}
}
