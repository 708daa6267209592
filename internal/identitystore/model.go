package identitystore

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/personmap"
)

// Errors. Every error a command or query returns matches one of them with
// errors.Is; ErrInvalid's message names the field.
var (
	// ErrNotFound: no such person, client, grant or token in the tenant.
	ErrNotFound = errors.New("identitystore: not found")
	// ErrInvalid: a command's input failed validation.
	ErrInvalid = errors.New("identitystore: invalid")
	// ErrExists: a client id or token hash is already registered.
	ErrExists = errors.New("identitystore: already exists")
	// ErrRevoked: the grant, token or person's agents are revoked.
	ErrRevoked = errors.New("identitystore: revoked")
	// ErrRefreshReuse: a refresh token other than the grant's current one
	// was presented; the grant has been revoked.
	ErrRefreshReuse = errors.New("identitystore: refresh token reuse")
	// ErrNotHosted: the tenant is not one of this store's.
	ErrNotHosted = errors.New("identitystore: tenant not hosted")
	// ErrStale: the projection may be missing recent events.
	ErrStale = errors.New("identitystore: projection is stale")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("identitystore: closed")
	// ErrAddressTaken: the address belongs to another person of the
	// tenant (bound to another IdP account); only an operator's re-binding
	// (RebindPerson) moves it.
	ErrAddressTaken = personmap.ErrAddressTaken
	// ErrAccountTaken: the IdP account is bound to another person.
	ErrAccountTaken = personmap.ErrAccountTaken
	// ErrErased: the person was erased (it comes with ErrNotFound).
	ErrErased = personmap.ErrErased
)

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
}

// Hash is the SHA-256 of a secret (client secret, refresh token, personal
// access token). Only hashes are stored: the secrets are high-entropy
// random values, so a plain hash is enough (see the package doc).
type Hash [sha256.Size]byte

// HashSecret hashes a secret.
func HashSecret(secret string) Hash { return sha256.Sum256([]byte(secret)) }

// ParseHash reads a lowercase or uppercase hex SHA-256.
func ParseHash(s string) (Hash, error) {
	var h Hash
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(h) {
		return Hash{}, invalid("hash", "want %d hex characters", 2*len(h))
	}
	copy(h[:], b)
	return h, nil
}

// IsZero reports whether h is unset.
func (h Hash) IsZero() bool { return h == Hash{} }

// Hex is the lowercase hex form.
func (h Hash) Hex() string { return hex.EncodeToString(h[:]) }

// Equal compares in constant time.
func (h Hash) Equal(o Hash) bool { return subtle.ConstantTimeCompare(h[:], o[:]) == 1 }

func hashFrom(b []byte) Hash {
	var h Hash
	if len(b) == len(h) {
		copy(h[:], b)
	}
	return h
}

func (h Hash) bytes() []byte {
	if h.IsZero() {
		return nil
	}
	return slices.Clone(h[:])
}

// Person is a person bound to an IdP account. Issuer, Subject and Address
// come from the person map (internal/personmap), never from the stream.
type Person struct {
	Tenant string
	// ID is opaque and random.
	ID      string
	Issuer  string
	Subject string
	Address string
	Roles   []string
	Bound   time.Time
	// AgentsRevokedBefore, when set, voids every grant and token of the
	// person issued at or before it.
	AgentsRevokedBefore time.Time
	AgentsRevokedReason string
	// SessionsRevokedBefore, when set, voids every web session of the
	// person issued at or before it.
	SessionsRevokedBefore time.Time

	erased bool
	// legacy is the account and address an event of an earlier version
	// put on the stream in clear (PersonBound on idp.<hash>, PersonUpdated
	// with an address); only the migration into the person map and
	// erasure read it.
	legacy personmap.Entry
}

// Client is a registered OAuth client.
type Client struct {
	Tenant       string
	ID           string
	Kind         alpv1.ClientKind
	RedirectURIs []string
	Name         string
	// SecretSHA256 is zero unless the client authenticates with a secret.
	SecretSHA256 Hash
	JWKSURI      string
	JWKS         []byte
	// RegisteredBy is the admin's person id, "dcr" or "cimd".
	RegisteredBy      string
	VendorAttestation string
	// AttestedBy is the admin who bound the attestation (empty when it was
	// given at registration).
	AttestedBy string
	Registered time.Time
	// FirstUsed is when a person first authorized an agent through the
	// client; zero if nobody has (see MarkClientUsed). Only dynamically
	// registered clients are marked: they expire if never used.
	FirstUsed time.Time
}

// Class is the trust class of agents using the client: company for a
// confidential client (only a tenant admin registers those) or a client with
// a vendor attestation, consumer for every other public client.
func (c Client) Class() alpv1.TrustClass {
	if c.Kind == alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL || c.VendorAttestation != "" {
		return alpv1.TrustClass_TRUST_CLASS_COMPANY
	}
	return alpv1.TrustClass_TRUST_CLASS_CONSUMER
}

// Grant is a person's authorization of an agent through a client.
type Grant struct {
	Tenant   string
	ID       string
	PersonID string
	ClientID string
	AgentID  string
	Class    alpv1.TrustClass
	Scopes   []string
	Resource string
	Issued   time.Time
	// RefreshGeneration counts refresh tokens (1 for the first); 0 when the
	// grant has none. RefreshSHA256 is the current one's hash.
	RefreshGeneration uint32
	RefreshSHA256     Hash
	Revoked           bool
	RevokedReason     string

	previousRefresh Hash // the generation before the current one
}

// PAT is a personal access token.
type PAT struct {
	Tenant        string
	ID            string
	PersonID      string
	Name          string
	TokenSHA256   Hash
	Scopes        []string
	Expires       time.Time
	Issued        time.Time
	Revoked       bool
	RevokedReason string
}

func (p Person) clone() Person { p.Roles = slices.Clone(p.Roles); return p }
func (c Client) clone() Client {
	c.RedirectURIs = slices.Clone(c.RedirectURIs)
	c.JWKS = slices.Clone(c.JWKS)
	return c
}
func (g Grant) clone() Grant { g.Scopes = slices.Clone(g.Scopes); return g }
func (p PAT) clone() PAT     { p.Scopes = slices.Clone(p.Scopes); return p }

// tenantState is the projection of one tenant.
type tenantState struct {
	domain    string
	persons   map[string]*Person // by id
	byAccount map[string]string  // earlier versions' account key (issuer, subject) → person id
	clients   map[string]*Client // by client id
	grants    map[string]*Grant  // by grant id
	byRefresh map[Hash]string    // every generation's hash → grant id
	pats      map[string]*PAT    // by id
	byPATHash map[Hash]string    // token hash → pat id
	// A person's grants and tokens by person id (ever issued; AgentClasses
	// skips the void ones), so a question about one person's agents does
	// not walk the tenant's.
	grantsOf map[string][]*Grant
	patsOf   map[string][]*PAT
	// unusedDynamic counts the PUBLIC_DCR clients never used (clients.go).
	unusedDynamic int
}

func newTenantState(domain string) *tenantState {
	return &tenantState{
		domain:    domain,
		persons:   map[string]*Person{},
		byAccount: map[string]string{},
		clients:   map[string]*Client{},
		grants:    map[string]*Grant{},
		byRefresh: map[Hash]string{},
		pats:      map[string]*PAT{},
		byPATHash: map[Hash]string{},
		grantsOf:  map[string][]*Grant{},
		patsOf:    map[string][]*PAT{},
	}
}

func accountKey(issuer, subject string) string { return issuer + "\x00" + subject }

// live is the person with the id unless unknown or erased.
func (ts *tenantState) live(id string) *Person {
	if p := ts.persons[id]; p != nil && !p.erased {
		return p
	}
	return nil
}

// voidReason says why g (or a token under it issued at issuedAt) is void,
// or "" if it is not. Fail closed: a revocation at the very instant of
// issue voids it (token times are whole seconds).
func (ts *tenantState) voidReason(g *Grant, issuedAt time.Time) string {
	if g.Revoked {
		return "grant revoked: " + g.RevokedReason
	}
	p := ts.persons[g.PersonID]
	if p == nil {
		return "unknown person"
	}
	if p.erased {
		return "person erased"
	}
	if before := p.AgentsRevokedBefore; !before.IsZero() {
		if !g.Issued.After(before) || !issuedAt.After(before) {
			return "person's agents revoked: " + p.AgentsRevokedReason
		}
	}
	return ""
}
