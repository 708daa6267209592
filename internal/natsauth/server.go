package natsauth

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nkeys"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/envelope"
)

// Isolation is how tenants are separated on one NATS.
type Isolation string

const (
	// Shared: one account (SharedAccount) holds one broker hosting all the
	// tenants; each role's user may use every tenant's subjects.
	Shared Isolation = "shared"
	// Hard: one account per tenant, each holding that tenant's own broker
	// (its own namespace) and role users whose permissions name only that
	// tenant. Accounts share nothing: no subject, stream or bucket of one
	// tenant is visible from another's account.
	Hard Isolation = "hard"
)

// SharedAccount is the account of shared isolation.
const SharedAccount = "ALPD"

// AccountName is the account of tenant in hard isolation: TENANT_<TOKEN>.
func AccountName(tenant string) string {
	return "TENANT_" + strings.ToUpper(bus.TenantToken(tenant))
}

// DefaultBrokerName is the broker name (namespace) of tenant's broker in
// hard isolation when none is given: the tenant token, shortened with a
// hash suffix when longer than 32 characters.
func DefaultBrokerName(tenant string) string {
	tok := bus.TenantToken(tenant)
	if len(tok) <= 32 {
		return tok
	}
	h := sha256.Sum256([]byte(tenant))
	return tok[:23] + "_" + hex.EncodeToString(h[:4])
}

// TLS names the server's certificate files, as paths on the NATS server.
type TLS struct {
	CertFile string
	KeyFile  string
	// CAFile is optional: the CA bundle the server trusts.
	CAFile string
}

func (t TLS) enabled() bool { return t.CertFile != "" || t.KeyFile != "" || t.CAFile != "" }

// ServerOptions describe the nats-server configuration to write.
type ServerOptions struct {
	// Listen is the client listener, host:port.
	Listen string
	// StoreDir is the JetStream store directory.
	StoreDir string
	// TLS, when set, makes TLS required for every client. Clients are not
	// asked for certificates (verify: false): they authenticate by nkey.
	TLS       TLS
	Isolation Isolation
	// BrokerName: in shared isolation the broker's name (namespace,
	// required); in hard isolation the name of every tenant's broker not
	// named in Brokers, and if empty [DefaultBrokerName] of the tenant.
	BrokerName string
	Tenants    alp.Tenants
	// Brokers names the broker of a tenant (hard isolation only).
	Brokers map[string]string
	// PublicKeys maps [User.ID] to the user's public nkey ("U…"). Needed by
	// ServerConfig, not by Users.
	PublicKeys map[string]string
}

// User is one NATS user: one role of one broker, in one account.
type User struct {
	Account string
	// Tenant is set in hard isolation: the one tenant of the account.
	Tenant string
	// Broker is the broker name (namespace) the user's permissions name.
	Broker  string
	Tenants []string
	Role    alpv1.Role
}

// Service is the user's role name ("policy").
func (u User) Service() string { return envelope.ServiceName(u.Role) }

// ID names the user: "<role>" in shared isolation, "<tenant>/<role>" in
// hard isolation. It keys ServerOptions.PublicKeys.
func (u User) ID() string {
	if u.Tenant == "" {
		return u.Service()
	}
	return u.Tenant + "/" + u.Service()
}

// SeedFile is where the user's seed is written, relative to the output
// directory: "<role>.nk", or "<tenant>/<role>.nk" in hard isolation.
func (u User) SeedFile() string {
	return filepath.Join(u.Tenant, u.Service()+".nk")
}

// InboxPrefix is the user's reply-subject prefix.
func (u User) InboxPrefix() string { return InboxPrefix(u.Broker, u.Service()) }

// Permissions are the user's allow-lists.
func (u User) Permissions() (Permissions, error) { return PermissionsFor(u.Broker, u.Tenants, u.Role) }

// Users checks the options (all but PublicKeys) and lists the users the
// configuration holds: per account, one per role.
func (o ServerOptions) Users() ([]User, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("natsauth: "+format, args...)) }
	if problem := checkListen(o.Listen); problem != "" {
		bad("listen %s", problem)
	}
	if strings.TrimSpace(o.StoreDir) == "" {
		bad("a JetStream store directory is required")
	}
	if o.TLS.enabled() {
		if o.TLS.CertFile == "" || o.TLS.KeyFile == "" {
			bad("TLS needs both a certificate and a key file")
		}
	}
	if err := checkTenants(o.Tenants); err != nil {
		errs = append(errs, err)
	}
	var users []User
	switch o.Isolation {
	case Shared:
		if len(o.Brokers) > 0 {
			bad("per-tenant broker names are for hard isolation; shared isolation has one broker")
		}
		if err := checkName(o.BrokerName); err != nil {
			errs = append(errs, err)
		}
		for _, r := range Roles() {
			users = append(users, User{Account: SharedAccount, Broker: o.BrokerName, Tenants: slices.Clone(o.Tenants), Role: r})
		}
	case Hard:
		if o.BrokerName != "" {
			if err := checkName(o.BrokerName); err != nil {
				errs = append(errs, err)
			}
		}
		for _, t := range slices.Sorted(maps.Keys(o.Brokers)) {
			if !o.Tenants.Hosts(t) {
				bad("a broker name is given for %q, which is not a tenant", t)
			} else if err := checkName(o.Brokers[t]); err != nil {
				errs = append(errs, fmt.Errorf("%w (tenant %s)", err, t))
			}
		}
		for _, t := range o.Tenants {
			name := o.Brokers[t]
			if name == "" {
				name = o.BrokerName
			}
			if name == "" {
				name = DefaultBrokerName(t)
			}
			for _, r := range Roles() {
				users = append(users, User{Account: AccountName(t), Tenant: t, Broker: name, Tenants: []string{t}, Role: r})
			}
		}
	default:
		bad("isolation %q is not %q or %q", o.Isolation, Shared, Hard)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return users, nil
}

func checkListen(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Sprintf("%q is not host:port", addr)
	}
	if strings.ContainsAny(host, " \t/\"\\") {
		return fmt.Sprintf("%q: %q is not a host name or IP address", addr, host)
	}
	n, err := strconv.Atoi(port)
	if err != nil || strings.ContainsAny(port, "+-") || n < 0 || n > 65535 {
		return fmt.Sprintf("%q: port must be a number from 0 to 65535", addr)
	}
	return ""
}

// NewUserKey creates a user nkey: its seed, newline-terminated, to write
// as the client's seed file (0600), and its public key for the server
// configuration.
func NewUserKey() (seed []byte, public string, err error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, "", fmt.Errorf("natsauth: create nkey: %w", err)
	}
	defer kp.Wipe()
	s, err := kp.Seed()
	if err != nil {
		return nil, "", fmt.Errorf("natsauth: nkey seed: %w", err)
	}
	// Wipe zeroes the key pair's own copy of the seed.
	seed = append(bytes.Clone(s), '\n')
	if public, err = kp.PublicKey(); err != nil {
		return nil, "", fmt.Errorf("natsauth: nkey public key: %w", err)
	}
	return seed, public, nil
}

// PublicKeyFromSeed returns the public key of a user seed (a seed file's
// content, surrounding whitespace allowed).
func PublicKeyFromSeed(seed []byte) (string, error) {
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		return "", fmt.Errorf("natsauth: not an nkey seed: %w", err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return "", fmt.Errorf("natsauth: nkey public key: %w", err)
	}
	if !nkeys.IsValidPublicUserKey(pub) {
		return "", errors.New("natsauth: the seed is not a user nkey seed")
	}
	return pub, nil
}

// ServerConfig renders the nats-server configuration: listener, JetStream
// store, optional TLS, and the accounts with one nkey user per role and
// its permissions.
func ServerConfig(o ServerOptions) (string, error) {
	users, err := o.Users()
	if err != nil {
		return "", err
	}
	var errs []error
	for _, u := range users {
		pk := o.PublicKeys[u.ID()]
		if !nkeys.IsValidPublicUserKey(pk) {
			errs = append(errs, fmt.Errorf("natsauth: user %s: %q is not a public user nkey", u.ID(), pk))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return "", err
	}

	var w strings.Builder
	p := func(indent int, format string, args ...any) {
		w.WriteString(strings.Repeat("  ", indent))
		fmt.Fprintf(&w, format, args...)
		w.WriteByte('\n')
	}
	p(0, "# nats-server configuration for alpd (generated from internal/natsauth; see docs/nats-permissions.md).")
	switch o.Isolation {
	case Shared:
		p(0, "# Isolation: shared. Account %s holds broker %q (tenants %s):", SharedAccount, o.BrokerName, strings.Join(o.Tenants, ", "))
	case Hard:
		p(0, "# Isolation: hard. One account per tenant, each holding that tenant's broker:")
	}
	p(0, "# one user per service role, authenticated by an nkey; each role's client")
	p(0, "# connects with its seed file and its own inbox prefix (_INBOX_<broker>_<role>).")
	p(0, "listen: %s", quote(o.Listen))
	p(0, "jetstream {")
	p(1, "store_dir: %s", quote(o.StoreDir))
	p(0, "}")
	if o.TLS.enabled() {
		p(0, "# TLS is required of every client; clients authenticate by nkey, not certificate.")
		p(0, "tls {")
		p(1, "cert_file: %s", quote(o.TLS.CertFile))
		p(1, "key_file: %s", quote(o.TLS.KeyFile))
		if o.TLS.CAFile != "" {
			p(1, "ca_file: %s", quote(o.TLS.CAFile))
		}
		p(1, "verify: false")
		p(0, "}")
	}
	p(0, "accounts {")
	for i := 0; i < len(users); {
		acct := users[i].Account
		j := i
		for j < len(users) && users[j].Account == acct {
			j++
		}
		if users[i].Tenant != "" {
			p(1, "# tenant %s, broker %q", users[i].Tenant, users[i].Broker)
		}
		p(1, "%s: {", quote(acct))
		p(2, "jetstream: enabled")
		p(2, "users: [")
		for k, u := range users[i:j] {
			perms, err := u.Permissions()
			if err != nil {
				return "", err
			}
			p(3, "# %s", u.ID())
			p(3, "{")
			p(4, "nkey: %s", quote(o.PublicKeys[u.ID()]))
			p(4, "permissions: {")
			p(5, "publish: { allow: [")
			list(&w, 6, perms.Publish)
			p(5, "] }")
			p(5, "subscribe: { allow: [")
			list(&w, 6, perms.Subscribe)
			p(5, "] }")
			if perms.AllowResponses {
				p(5, "allow_responses: true")
			}
			p(4, "}")
			if k < j-i-1 {
				p(3, "},")
			} else {
				p(3, "}")
			}
		}
		p(2, "]")
		p(1, "}")
		i = j
	}
	p(0, "}")
	return w.String(), nil
}

func list(w *strings.Builder, indent int, items []string) {
	for i, s := range items {
		w.WriteString(strings.Repeat("  ", indent))
		w.WriteString(quote(s))
		if i < len(items)-1 {
			w.WriteByte(',')
		}
		w.WriteByte('\n')
	}
}

// quote writes s as a nats-server configuration string: double quotes,
// which keep "$" literal (no variable), with the escapes the parser knows.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			b.WriteString(`\"`)
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\r':
			b.WriteString(`\r`)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
