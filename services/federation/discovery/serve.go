package discovery

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/alpwire"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/loopback"
)

// CodeUnknownDomain answers GET /.well-known/alp for a Host this broker
// does not host.
const CodeUnknownDomain = "unknown_domain"

// PublisherConfig configures a Publisher; zero durations take the
// defaults named.
type PublisherConfig struct {
	// BrokerName is this broker's name (federation.broker_name); its
	// federation key is the KeyStore's FEDERATION key of tenant BrokerName.
	BrokerName string
	// BrokerURL is this broker's https base URL (http.public_url).
	BrokerURL string
	// Tenants are the domains this broker is home for.
	Tenants alp.Tenants
	Keys    keystore.KeyStore
	// MaxAge is the DomainDocs' max_age and Cache-Control (24h).
	MaxAge time.Duration
	// KeysMaxAge is BrokerKeys' Cache-Control max-age (1h): how long a
	// peer may go on trusting a key after this broker revokes it.
	KeysMaxAge time.Duration
	// KeysValidity sets valid_until_ts, that long after serving (24h).
	KeysValidity time.Duration
	// Now is the clock (time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

// Publisher serves this broker's discovery documents.
type Publisher struct {
	cfg  PublisherConfig
	base string // BrokerURL without a trailing slash
}

// NewPublisher checks cfg: a valid broker name and tenants, and an https
// broker URL (plain http only on a loopback host, the dev setup).
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if err := alp.ValidateTenant(cfg.BrokerName); err != nil {
		return nil, fmt.Errorf("discovery: broker name: %w", err)
	}
	if err := alp.ValidateTenants(cfg.Tenants); err != nil {
		return nil, fmt.Errorf("discovery: tenants: %w", err)
	}
	if cfg.Keys == nil {
		return nil, errors.New("discovery: publisher without a KeyStore")
	}
	base := strings.TrimRight(cfg.BrokerURL, "/")
	switch {
	case strings.HasPrefix(base, "https://"):
	case strings.HasPrefix(base, "http://") && loopback.URL(base):
	default:
		return nil, fmt.Errorf("discovery: broker URL %q is not https (or plain http on loopback)", cfg.BrokerURL)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.MaxAge, 24*time.Hour)
	def(&cfg.KeysMaxAge, time.Hour)
	def(&cfg.KeysValidity, 24*time.Hour)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Publisher{cfg: cfg, base: base}, nil
}

// DomainDoc is the DomainDoc of a hosted domain; ok is false for any other.
func (p *Publisher) DomainDoc(domain string) (doc alpwire.DomainDoc, ok bool) {
	if !p.cfg.Tenants.Hosts(domain) {
		return doc, false
	}
	return alpwire.DomainDoc{Wire: alpwire.Version, Domain: domain, Broker: p.cfg.BrokerName, BrokerURL: p.base,
		MaxAge: int64(p.cfg.MaxAge / time.Second)}, true
}

// ServeDomainDoc answers GET /.well-known/alp with the DomainDoc of the
// tenant the request's Host names (its port ignored), or 404
// unknown_domain.
func (p *Publisher) ServeDomainDoc(w http.ResponseWriter, r *http.Request) {
	host := requestHost(r.Host)
	doc, ok := p.DomainDoc(host)
	if !ok {
		httpjson.WriteError(w, httpjson.Errorf(http.StatusNotFound, CodeUnknownDomain, "this broker is not home for %q", host))
		return
	}
	httpjson.WritePublic(w, r, doc, p.cfg.MaxAge)
}

// requestHost is a Host header's name: without port, lower case, without a
// trailing root dot.
func requestHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// ServeBrokerKeys answers GET /.well-known/alp/broker with the signed
// BrokerKeys.
func (p *Publisher) ServeBrokerKeys(w http.ResponseWriter, r *http.Request) {
	raw, err := p.SignedBrokerKeys(r.Context())
	if err != nil {
		p.cfg.Logger.ErrorContext(r.Context(), "broker keys", "error", err)
		httpjson.WriteError(w, err)
		return
	}
	httpjson.WritePublic(w, r, json.RawMessage(raw), p.cfg.KeysMaxAge)
}

// SignedBrokerKeys builds this broker's BrokerKeys from the KeyStore and
// signs it with the active federation key (made if there is none): ACTIVE
// keys are verify_keys, RETIRED ones old_verify_keys (expired when the
// next key was made), REVOKED ones revoked_keys; ledger_keys are each
// tenant's ledger checkpoint verifier keys (ACTIVE and RETIRED; a revoked
// ledger key is left out, as nothing here can say since when it is void).
func (p *Publisher) SignedBrokerKeys(ctx context.Context) ([]byte, error) {
	// A rotation between reading the active key and signing makes the
	// signer refuse; the second round sees the new key.
	var err error
	for range 2 {
		var raw []byte
		if raw, err = p.signBrokerKeys(ctx); err == nil {
			return raw, nil
		}
	}
	return nil, err
}

func (p *Publisher) signBrokerKeys(ctx context.Context) ([]byte, error) {
	active, err := BrokerKey(ctx, p.cfg.Keys, p.cfg.BrokerName)
	if err != nil {
		return nil, err
	}
	signer, err := p.cfg.Keys.Signer(ctx, p.cfg.BrokerName, alpv1.KeyPurpose_KEY_PURPOSE_FEDERATION, active.KeyID)
	if err != nil {
		return nil, fmt.Errorf("discovery: federation signer: %w", err)
	}
	bk, err := p.brokerKeys(ctx)
	if err != nil {
		return nil, err
	}
	raw, err := alpwire.SignBrokerKeys(bk, alpwire.KeyID(active.PublicKey), signer)
	if err != nil {
		return nil, fmt.Errorf("discovery: signing broker keys: %w", err)
	}
	return raw, nil
}

func (p *Publisher) brokerKeys(ctx context.Context) (*alpwire.BrokerKeys, error) {
	keys, err := p.cfg.Keys.Keys(ctx, p.cfg.BrokerName, alpv1.KeyPurpose_KEY_PURPOSE_FEDERATION)
	if err != nil {
		return nil, fmt.Errorf("discovery: federation keys of %s: %w", p.cfg.BrokerName, err)
	}
	bk := &alpwire.BrokerKeys{
		Wire: alpwire.Version, Broker: p.cfg.BrokerName, BrokerURL: p.base, FederationURL: p.base + alpwire.FederationPath,
		VerifyKeys:    map[string]alpwire.VerifyKey{},
		OldVerifyKeys: map[string]alpwire.OldVerifyKey{},
		RevokedKeys:   map[string]alpwire.RevokedKey{},
		LedgerKeys:    map[string][]string{},
		ValidUntilTS:  alpwire.Millis(p.cfg.Now().Add(p.cfg.KeysValidity)),
	}
	for i, k := range keys {
		id := alpwire.KeyID(k.PublicKey)
		pub := base64.RawURLEncoding.EncodeToString(k.PublicKey)
		switch k.State {
		case alpv1.KeyState_KEY_STATE_ACTIVE:
			bk.VerifyKeys[id] = alpwire.VerifyKey{Key: pub, ValidFromTS: k.Created.UnixMilli()}
		case alpv1.KeyState_KEY_STATE_RETIRED:
			// The store keeps no retirement time; the next key's creation
			// is when this one stopped being current (Rotate does both at
			// once). Keys are oldest first, and BrokerKey made sure an
			// active one follows.
			expired := p.cfg.Now()
			if i+1 < len(keys) {
				expired = keys[i+1].Created
			}
			bk.OldVerifyKeys[id] = alpwire.OldVerifyKey{Key: pub, ValidFromTS: k.Created.UnixMilli(), ExpiredTS: expired.UnixMilli()}
		case alpv1.KeyState_KEY_STATE_REVOKED:
			bk.RevokedKeys[id] = alpwire.RevokedKey{Key: pub, CompromisedTS: k.CompromisedAt.UnixMilli()}
		}
	}
	for _, tenant := range p.cfg.Tenants {
		lkeys, err := p.cfg.Keys.Keys(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER)
		if err != nil {
			return nil, fmt.Errorf("discovery: ledger keys of %s: %w", tenant, err)
		}
		for _, k := range lkeys {
			if k.State != alpv1.KeyState_KEY_STATE_ACTIVE && k.State != alpv1.KeyState_KEY_STATE_RETIRED {
				continue
			}
			vkey, err := ledgerlog.VerifierKey(tenant, k.PublicKey)
			if err != nil {
				return nil, fmt.Errorf("discovery: ledger key %s of %s: %w", k.KeyID, tenant, err)
			}
			bk.LedgerKeys[tenant] = append(bk.LedgerKeys[tenant], vkey)
		}
	}
	return bk, nil
}

// BrokerKey returns the broker's ACTIVE federation key (KeyStore slot
// tenant = broker name, purpose FEDERATION), generating one if there is
// none (first start, or after the active key was revoked or retired).
func BrokerKey(ctx context.Context, ks keystore.KeyStore, broker string) (keystore.KeyInfo, error) {
	const purpose = alpv1.KeyPurpose_KEY_PURPOSE_FEDERATION
	k, err := ks.Active(ctx, broker, purpose)
	if !errors.Is(err, keystore.ErrNoActiveKey) {
		if err != nil {
			return k, fmt.Errorf("discovery: federation key of %s: %w", broker, err)
		}
		return k, nil
	}
	k, err = ks.Generate(ctx, broker, purpose)
	if errors.Is(err, keystore.ErrActiveKeyExists) {
		// Another replica made it first.
		k, err = ks.Active(ctx, broker, purpose)
	}
	var oe *keystore.ObserverError
	if errors.As(err, &oe) {
		// Saved; the observer's trouble is the store owner's to report.
		err = nil
	}
	if err != nil {
		return k, fmt.Errorf("discovery: generating the federation key of %s: %w", broker, err)
	}
	return k, nil
}
