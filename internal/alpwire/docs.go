package alpwire

import (
	"crypto"
	"crypto/ed25519"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// MaxDocBytes bounds a DomainDoc and a BrokerKeys document.
const MaxDocBytes = 64 << 10

// FederationPath is where a broker's federation API lives below its base
// URL.
const FederationPath = "/federation/v1"

// KeyCacheCap caps how long a receiver trusts fetched BrokerKeys, whatever
// their valid_until_ts says.
const KeyCacheCap = 7 * 24 * time.Hour

// DomainDoc is a domain's /.well-known/alp: which broker is home for its
// people. It is unsigned: HTTPS of the domain itself anchors it.
type DomainDoc struct {
	Wire      string `json:"wire"`
	Domain    string `json:"domain"`
	Broker    string `json:"broker"`     // broker name
	BrokerURL string `json:"broker_url"` // the broker's https base URL
	MaxAge    int64  `json:"max_age"`    // seconds a resolver may cache it
}

// ParseDomainDoc reads a DomainDoc under the wire rules (at most
// MaxDocBytes). The caller checks that Domain is the domain it asked.
func ParseDomainDoc(raw []byte) (*DomainDoc, error) {
	obj, err := parseObject(raw, MaxDocBytes)
	if err != nil {
		return nil, err
	}
	f := readFields(obj, "")
	f.version()
	d := &DomainDoc{Wire: Version}
	var p string
	d.Domain, p = f.str("domain", true, 253)
	f.dnsName(d.Domain, p)
	d.Broker, p = f.str("broker", true, 253)
	f.dnsName(d.Broker, p)
	d.BrokerURL, p = f.str("broker_url", true, 0)
	f.baseURL(d.BrokerURL, p)
	v, p := f.take("max_age", kindNumber, true)
	if v != nil {
		d.MaxAge = v.num
		if v.num < 0 {
			f.fail(CodeOutOfRange, p, "is negative")
		}
	}
	if err := f.done(); err != nil {
		return nil, err
	}
	return d, nil
}

// VerifyKey is a current key of a broker: it verifies requests and
// envelopes.
type VerifyKey struct {
	Key         string `json:"key"` // base64url Ed25519 public key
	ValidFromTS int64  `json:"valid_from_ts"`
}

// OldVerifyKey is a rotated-out key: it verifies only objects made before
// ExpiredTS (stored receipts), never new requests.
type OldVerifyKey struct {
	Key         string `json:"key"`
	ValidFromTS int64  `json:"valid_from_ts"`
	ExpiredTS   int64  `json:"expired_ts"`
}

// RevokedKey is a compromised key: everything it signed at or after
// CompromisedTS is void.
type RevokedKey struct {
	Key           string `json:"key"`
	CompromisedTS int64  `json:"compromised_ts"`
}

// BrokerKeys is a broker's <broker_url>/.well-known/alp/broker: its
// identity and federation keys, signed under CtxBrokerKeys by one of its
// current keys. Maps are keyed by key id ("ed25519:<id>"); LedgerKeys maps
// each hosted domain to its ledger's note verifier keys (as its
// checkpoints are signed).
type BrokerKeys struct {
	Wire          string                  `json:"wire"`
	Broker        string                  `json:"broker"`
	BrokerURL     string                  `json:"broker_url"`
	FederationURL string                  `json:"federation_url"` // BrokerURL + FederationPath
	VerifyKeys    map[string]VerifyKey    `json:"verify_keys"`
	OldVerifyKeys map[string]OldVerifyKey `json:"old_verify_keys,omitempty"`
	RevokedKeys   map[string]RevokedKey   `json:"revoked_keys,omitempty"`
	LedgerKeys    map[string][]string     `json:"ledger_keys,omitempty"`
	ValidUntilTS  int64                   `json:"valid_until_ts"`
	Signatures    Signatures              `json:"signatures,omitempty"`
}

// SignBrokerKeys checks b, sets b.Wire and returns its bytes signed by
// b.Broker with keyID, which must be one of b.VerifyKeys and s's key.
func SignBrokerKeys(b *BrokerKeys, keyID string, s crypto.Signer) ([]byte, error) {
	c := *b
	c.Wire = Version
	c.Signatures = nil
	k, ok := c.VerifyKeys[keyID]
	if !ok {
		return nil, fmt.Errorf("alpwire: sign broker keys: %s is not one of its verify_keys", keyID)
	}
	if pub, ok := s.Public().(ed25519.PublicKey); !ok || b64url.EncodeToString(pub) != k.Key {
		return nil, fmt.Errorf("alpwire: sign broker keys: the signer's key is not %s", keyID)
	}
	raw, err := marshalUnsigned(&c)
	if err != nil {
		return nil, err
	}
	if _, err := parseBrokerKeys(raw, false); err != nil {
		return nil, fmt.Errorf("alpwire: sign broker keys: %w", err)
	}
	out, err := AddSignature(raw, CtxBrokerKeys, c.Broker, keyID, s)
	if err != nil {
		return nil, err
	}
	b.Wire = Version
	return out, nil
}

// ParseBrokerKeys reads a BrokerKeys document under the wire rules (at most
// MaxDocBytes) and verifies its self-signature: b.Broker's signature by one
// of its verify_keys. The caller checks that Broker and BrokerURL are the
// ones it asked, and caches it until CacheUntil.
func ParseBrokerKeys(raw []byte) (*BrokerKeys, error) {
	b, err := parseBrokerKeys(raw, true)
	if err != nil {
		return nil, err
	}
	return b, nil
}

func parseBrokerKeys(raw []byte, signed bool) (*BrokerKeys, error) {
	obj, perr := parseObject(raw, MaxDocBytes)
	if perr != nil {
		return nil, perr
	}
	f := readFields(obj, "")
	f.version()
	b := &BrokerKeys{Wire: Version}
	var p string
	b.Broker, p = f.str("broker", true, 253)
	f.dnsName(b.Broker, p)
	b.BrokerURL, p = f.str("broker_url", true, 0)
	f.baseURL(b.BrokerURL, p)
	b.FederationURL, p = f.str("federation_url", true, 0)
	if f.err == nil && b.FederationURL != b.BrokerURL+FederationPath {
		f.fail(CodeInvalidValue, p, "is not broker_url + "+FederationPath)
	}
	seen := map[string]string{} // key id → pointer of its first entry
	b.VerifyKeys = map[string]VerifyKey{}
	if m := f.object("verify_keys", true); m != nil {
		if len(m.members) == 0 {
			f.fail(CodeInvalidValue, "/verify_keys", "holds no key")
		}
		for _, km := range m.members {
			kf := f.keyEntry(km, "/verify_keys", seen)
			k := VerifyKey{}
			k.Key = kf.pubKey()
			k.ValidFromTS = kf.ts("valid_from_ts")
			f.merge(kf)
			b.VerifyKeys[km.key] = k
		}
	}
	if m := f.object("old_verify_keys", false); m != nil {
		b.OldVerifyKeys = map[string]OldVerifyKey{}
		for _, km := range m.members {
			kf := f.keyEntry(km, "/old_verify_keys", seen)
			k := OldVerifyKey{}
			k.Key = kf.pubKey()
			k.ValidFromTS = kf.ts("valid_from_ts")
			k.ExpiredTS = kf.ts("expired_ts")
			if kf.err == nil && k.ExpiredTS < k.ValidFromTS {
				kf.fail(CodeInvalidValue, child(kf.ptr, "expired_ts"), "is before valid_from_ts")
			}
			f.merge(kf)
			b.OldVerifyKeys[km.key] = k
		}
	}
	if m := f.object("revoked_keys", false); m != nil {
		b.RevokedKeys = map[string]RevokedKey{}
		for _, km := range m.members {
			kf := f.keyEntry(km, "/revoked_keys", seen)
			k := RevokedKey{}
			k.Key = kf.pubKey()
			k.CompromisedTS = kf.ts("compromised_ts")
			f.merge(kf)
			b.RevokedKeys[km.key] = k
		}
	}
	if m := f.object("ledger_keys", false); m != nil {
		b.LedgerKeys = map[string][]string{}
		for _, dm := range m.members {
			dp := child("/ledger_keys", dm.key)
			f.dnsName(dm.key, dp)
			if f.err == nil && dm.val.kind != kindArray {
				f.fail(CodeWrongType, dp, "is "+dm.val.kind.String()+", want an array")
				continue
			}
			var vks []string
			for i, e := range dm.val.elems {
				ep := index(dp, i)
				if f.err == nil && e.kind != kindString {
					f.fail(CodeWrongType, ep, "is "+e.kind.String()+", want a string")
					continue
				}
				if f.err == nil {
					if _, err := note.NewVerifier(e.str); err != nil {
						f.fail(CodeInvalidValue, ep, "is not a note verifier key: "+err.Error())
					}
				}
				vks = append(vks, e.str)
			}
			b.LedgerKeys[dm.key] = vks
		}
	}
	b.ValidUntilTS = f.ts("valid_until_ts")
	sigs, perr := f.signatures(obj, signed)
	if perr != nil {
		return nil, perr
	}
	if !signed {
		return b, nil
	}
	b.Signatures = sigs
	current := func(broker, keyID string, _ time.Time) (ed25519.PublicKey, error) {
		k, ok := b.VerifyKeys[keyID]
		if !ok {
			return nil, newErr(CodeUnknownKey, "", keyID+" is not one of the document's verify_keys")
		}
		pub, _ := decodeB64(k.Key, ed25519.PublicKeySize)
		return pub, nil
	}
	if err := verifyParsed(raw, obj, sigs, CtxBrokerKeys, b.Broker, current, time.Time{}); err != nil {
		return nil, err
	}
	return b, nil
}

// keyEntry starts reading one {"key": …} entry of a key map; a key id may
// appear in one map only.
func (f *fields) keyEntry(km member, mapPtr string, seen map[string]string) *fields {
	p := child(mapPtr, km.key)
	kf := &fields{n: &node{kind: kindObject}, ptr: p, used: map[string]bool{}}
	if f.err != nil {
		return kf
	}
	if err := keyIDProblem(km.key, p); err != nil {
		kf.err = err
		return kf
	}
	if first, dup := seen[km.key]; dup {
		kf.fail(CodeDuplicateKey, p, km.key+" is also listed at "+first)
		return kf
	}
	seen[km.key] = p
	if km.val.kind != kindObject {
		kf.fail(CodeWrongType, p, "is "+km.val.kind.String()+", want an object")
		return kf
	}
	kf.n = km.val
	return kf
}

func (f *fields) pubKey() string {
	k, p := f.str("key", true, 0)
	f.b64(k, p, ed25519.PublicKeySize)
	return k
}

// merge takes over a nested reader's first problem (or unknown member).
func (f *fields) merge(kf *fields) {
	if err := kf.done(); err != nil && f.err == nil {
		f.err = err
	}
}

// baseURL checks a broker's base URL: https (plain http only for a
// loopback host, which discovery allows only under its dev flag), no user,
// query or fragment, no trailing slash.
func (f *fields) baseURL(v, p string) {
	if v == "" || f.err != nil {
		return
	}
	u, err := url.Parse(v)
	switch {
	case err != nil:
		f.fail(CodeInvalidValue, p, "is not a URL: "+err.Error())
	case u.Scheme != "https" && !(u.Scheme == "http" && isLoopback(u.Hostname())):
		f.fail(CodeInvalidValue, p, "is not an https URL (plain http only on loopback)")
	case u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || strings.Contains(v, "#") || strings.Contains(v, "?"):
		f.fail(CodeInvalidValue, p, "must be scheme://host[:port][/path] without user, query or fragment")
	case strings.HasSuffix(v, "/"):
		f.fail(CodeInvalidValue, p, "must not end in '/'")
	case u.String() != v:
		f.fail(CodeInvalidValue, p, "is not in canonical form ("+strconv.Quote(u.String())+")")
	}
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Key returns the key keyID for something made at at, under the rule: a
// current key always; an old key only before its expired_ts; a revoked key
// only before its compromised_ts. A KeyResolver over fetched documents
// calls it.
func (b *BrokerKeys) Key(keyID string, at time.Time) (ed25519.PublicKey, error) {
	ms := Millis(at)
	var enc string
	if k, ok := b.RevokedKeys[keyID]; ok {
		if ms >= k.CompromisedTS {
			return nil, newErr(CodeKeyRevoked, "", keyID+" of "+b.Broker+" was revoked as compromised at "+strconv.FormatInt(k.CompromisedTS, 10))
		}
		enc = k.Key
	} else if k, ok := b.VerifyKeys[keyID]; ok {
		enc = k.Key
	} else if k, ok := b.OldVerifyKeys[keyID]; ok {
		if ms >= k.ExpiredTS || ms < k.ValidFromTS {
			return nil, newErr(CodeKeyExpired, "", keyID+" of "+b.Broker+" was valid from "+strconv.FormatInt(k.ValidFromTS, 10)+" until "+strconv.FormatInt(k.ExpiredTS, 10))
		}
		enc = k.Key
	} else {
		return nil, newErr(CodeUnknownKey, "", b.Broker+" publishes no key "+keyID)
	}
	pub, problem := decodeB64(enc, ed25519.PublicKeySize)
	if problem != "" {
		return nil, newErr(CodeBadBase64, "", keyID+": "+problem)
	}
	return pub, nil
}

// CacheUntil is how long a receiver may use b: min(valid_until_ts,
// now+KeyCacheCap).
func (b *BrokerKeys) CacheUntil(now time.Time) time.Time {
	until := Time(b.ValidUntilTS)
	if c := now.Add(KeyCacheCap); c.Before(until) {
		return c
	}
	return until
}
