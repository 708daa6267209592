package oauthas

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Authorization codes are "alpac_" + 32 random bytes in unpadded base64url.
// The code bucket holds, under "c_" + hex SHA-256 of the code, what the code
// authorizes (codeEntry); the code itself is never stored.
//
// One-time use is a compare-and-set on the entry's latest revision, so every
// replica sharing the bucket agrees, even when two exchanges race:
//
//	issued ──(the exchange that wins the CAS)──▶ consumed ──(same, after IssueGrant)──▶ used{grant}
//	consumed ──(a racing exchange that lost)──▶ reused
//
// A later exchange of a consumed, used or reused code is reuse: it fails
// and revokes the grant recorded in the entry (RFC 6749 §4.1.2). The winner
// that finds "reused" where it wants to record its grant revokes that grant
// itself. The entry's Expires bounds the exchange (Config.CodeTTL); the
// bucket's TTL (CodesBucketConfig: DefaultCodesRetention) bounds how long a
// spent code is remembered.
const codePrefix = "alpac_"

const (
	codeIssued   = "issued"
	codeConsumed = "consumed"
	codeUsed     = "used"
	codeReused   = "reused"
)

type codeEntry struct {
	State       string    `json:"state"`
	Tenant      string    `json:"tenant"`
	ClientID    string    `json:"client_id"`
	RedirectURI string    `json:"redirect_uri"`
	Challenge   string    `json:"code_challenge"`
	Resource    string    `json:"resource"`
	Scopes      []string  `json:"scopes"`
	PersonID    string    `json:"person_id"`
	AuthTime    time.Time `json:"auth_time,omitzero"`
	Issued      time.Time `json:"issued"`
	Expires     time.Time `json:"expires"`
	GrantID     string    `json:"grant_id,omitempty"`
}

// newSecret returns prefix + 32 random bytes in unpadded base64url.
func newSecret(prefix string) string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (Go 1.24+)
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// wellFormed reports whether s is prefix + 43 base64url characters.
func wellFormed(s, prefix string) bool {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok || len(rest) != 43 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if !b64urlChar(rest[i]) {
			return false
		}
	}
	return true
}

func b64urlChar(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

func codeKey(code string) string {
	h := sha256.Sum256([]byte(code))
	return "c_" + hex.EncodeToString(h[:])
}

type codeStore struct{ kv jetstream.KeyValue }

var errCodeNotFound = errors.New("oauthas: code not found")

func (c codeStore) create(ctx context.Context, code string, e codeEntry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	_, err = c.kv.Create(ctx, codeKey(code), b)
	return err
}

func (c codeStore) get(ctx context.Context, key string) (codeEntry, uint64, error) {
	ent, err := c.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return codeEntry{}, 0, errCodeNotFound
	}
	if err != nil {
		return codeEntry{}, 0, err
	}
	var e codeEntry
	if err := json.Unmarshal(ent.Value(), &e); err != nil {
		return codeEntry{}, 0, fmt.Errorf("oauthas: code entry: %w", err)
	}
	return e, ent.Revision(), nil
}

// update is a compare-and-set on the entry's revision; a lost race gives
// an error matching jetstream.ErrKeyRevisionMismatch.
func (c codeStore) update(ctx context.Context, key string, e codeEntry, rev uint64) (uint64, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return 0, err
	}
	return c.kv.Update(ctx, key, b, rev)
}
