package accesstoken

import (
	"time"
)

// MaxLifetime is the longest an access token may live (exp - iat), enforced
// at minting and at verification. It bounds how long a revocation can go
// unnoticed (ARCHITECTURE.md §7).
const MaxLifetime = 10 * time.Minute

// Token type header value (RFC 9068 §2.1).
const TokenType = "at+jwt"

// Trust classes (ARCHITECTURE.md §7: the class comes from the credential).
const (
	ClassCompany  = "company"
	ClassConsumer = "consumer"
)

// Claims are the contents of an access token.
type Claims struct {
	// Issuer ("iss") is the tenant's authorization server issuer URL.
	Issuer string
	// Subject ("sub") is the opaque id of the person the agent acts for.
	Subject string
	// Audience ("aud") is the one resource the token is for (RFC 8707),
	// e.g. "https://broker.example/mcp".
	Audience string
	// Tenant ("tenant") is the tenant that issued the token; its keys sign it.
	Tenant string
	// ClientID ("client_id") is the OAuth client of the agent.
	ClientID string
	// AgentID ("agent") is the agent.
	AgentID string
	// GrantID ("grant") is the person's grant (consent) the token comes from.
	GrantID string
	// Class ("class") is ClassCompany or ClassConsumer.
	Class string
	// Scopes ("scope", space-separated); may be empty.
	Scopes []string
	// IssuedAt ("iat") and Expiry ("exp"), whole seconds.
	IssuedAt time.Time
	Expiry   time.Time
	// ID ("jti") is unique per token.
	ID string
}

// wireClaims is the JSON form of Claims as minted.
type wireClaims struct {
	Issuer   string `json:"iss"`
	Subject  string `json:"sub"`
	Audience string `json:"aud"`
	Expiry   int64  `json:"exp"`
	IssuedAt int64  `json:"iat"`
	ID       string `json:"jti"`
	ClientID string `json:"client_id"`
	Scope    string `json:"scope,omitempty"`
	Tenant   string `json:"tenant"`
	AgentID  string `json:"agent"`
	GrantID  string `json:"grant"`
	Class    string `json:"class"`
}

func validClass(c string) bool { return c == ClassCompany || c == ClassConsumer }

// validScopeToken reports whether s is an RFC 6749 §3.3 scope-token:
// 1*( %x21 / %x23-5B / %x5D-7E ).
func validScopeToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
