package config

import (
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/loopback"
)

// Limits enforced by Validate.
const (
	MaxReplicas      = 5
	MaxMaxDeliver    = 100
	MinDuplicates    = time.Second
	MinEventMaxAge   = time.Hour
	MinAckWait       = time.Second
	maxBrokerNameLen = 32
	// MaxIdPScopes bounds identity.idps[].scopes (they go into every
	// authorization URL); it matches internal/signin's MaxExtraScopes.
	MaxIdPScopes   = 16
	maxIdPScopeLen = 128
)

// alwaysRequestedScopes are the scopes every sign-in asks for
// (internal/signin.Scopes); identity.idps[].scopes lists only others.
var alwaysRequestedScopes = []string{"openid", "profile", "email", "offline_access"}

// fieldError is one violated rule, at one key path.
type fieldError struct {
	path string
	msg  string
}

// Validate checks every rule and returns all violations joined
// (errors.Join), each as "config: <key path>: <problem>"; nil if c is
// valid. It checks that files named by the config exist, but does not
// read them, nor bind listeners or dial anything.
func (c *Config) Validate() error {
	return joinErrors(c.validate(), nil)
}

// joinErrors formats field errors, adding where a value came from when
// origins knows (key path -> "--flag" or "ENV_VAR").
func joinErrors(fes []fieldError, origins map[string]string) error {
	if len(fes) == 0 {
		return nil
	}
	errs := make([]error, len(fes))
	for i, fe := range fes {
		suffix := ""
		if o := lookupOrigin(origins, fe.path); o != "" {
			suffix = " (set by " + o + ")"
		}
		errs[i] = fmt.Errorf("config: %s: %s%s", fe.path, fe.msg, suffix)
	}
	return errors.Join(errs...)
}

// lookupOrigin finds the origin of path or of the nearest key above it:
// "nats.urls[1]" was set by whatever set "nats.urls".
func lookupOrigin(origins map[string]string, path string) string {
	for p := path; p != ""; {
		if o, ok := origins[p]; ok {
			return o
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return ""
}

func (c *Config) validate() []fieldError {
	var fes []fieldError
	bad := func(path, format string, args ...any) {
		fes = append(fes, fieldError{path, fmt.Sprintf(format, args...)})
	}

	// broker
	if !validBrokerName(c.Broker.Name) {
		bad("broker.name", "%q must be 1 to %d characters of A-Z, a-z, 0-9, _ and -", c.Broker.Name, maxBrokerNameLen)
	}
	if len(c.Broker.Tenants) == 0 {
		bad("broker.tenants", "at least one tenant domain is required (or set %s)", EnvTenants)
	}
	seen := map[string]int{}
	for i, t := range c.Broker.Tenants {
		path := fmt.Sprintf("broker.tenants[%d].domain", i)
		if problem := checkDomain(t.Domain); problem != "" {
			bad(path, "%q %s", t.Domain, problem)
			continue
		}
		if j, dup := seen[t.Domain]; dup {
			bad(path, "%q is already listed as broker.tenants[%d]", t.Domain, j)
			continue
		}
		seen[t.Domain] = i
	}

	// data_dir
	if c.DataDir == "" {
		bad("data_dir", "must not be empty")
	}

	// http
	if problem := checkHostPort(c.HTTP.Addr, false); problem != "" {
		bad("http.addr", "%s", problem)
	}

	// nats
	for i, u := range c.NATS.URLs {
		if problem := checkNATSURL(u); problem != "" {
			bad(fmt.Sprintf("nats.urls[%d]", i), "%s", problem)
		}
	}
	if c.NATS.Listen != "" {
		if !c.Embedded() {
			bad("nats.listen", "is only for the embedded server, but nats.urls is set too; remove one of them")
		} else if problem := checkHostPort(c.NATS.Listen, false); problem != "" {
			bad("nats.listen", "%s", problem)
		}
	}
	if s := c.NATS.SyncInterval; s != "" {
		d, err := time.ParseDuration(s)
		switch {
		case !c.Embedded():
			bad("nats.sync_interval", "is only for the embedded server, but nats.urls is set; set sync_interval in the jetstream block of the NATS servers' configuration")
		case s == SyncAlways:
		case err != nil:
			bad("nats.sync_interval", "%q is neither %q nor a duration such as \"1s\"", s, SyncAlways)
		case d < MinSyncInterval || d > MaxSyncInterval:
			bad("nats.sync_interval", "%s is out of range %s to %s", fmtDuration(d), fmtDuration(MinSyncInterval), fmtDuration(MaxSyncInterval))
		}
	}
	if c.NATS.CredentialsFile != "" {
		if problem := checkFile(c.NATS.CredentialsFile); problem != "" {
			bad("nats.credentials_file", "%s", problem)
		}
	}
	// The embedded server has no users and no TLS for in-process clients,
	// so client credentials and TLS files only make sense with nats.urls.
	external := func(key, path string) bool {
		if path == "" {
			return false
		}
		if c.Embedded() {
			bad(key, "is for an external NATS (nats.urls); the embedded server has no users or TLS")
			return false
		}
		if problem := checkFile(path); problem != "" {
			bad(key, "%s", problem)
			return false
		}
		return true
	}
	if external("nats.nkey_seed_file", c.NATS.NKeySeedFile) && c.NATS.CredentialsFile != "" {
		bad("nats.nkey_seed_file", "is set and so is nats.credentials_file; authenticate one way only")
	}
	external("nats.tls.ca_file", c.NATS.TLS.CAFile)
	cert := external("nats.tls.cert_file", c.NATS.TLS.CertFile)
	key := external("nats.tls.key_file", c.NATS.TLS.KeyFile)
	if !c.Embedded() {
		switch {
		case cert && c.NATS.TLS.KeyFile == "":
			bad("nats.tls.key_file", "is required with nats.tls.cert_file (a client certificate needs its key)")
		case key && c.NATS.TLS.CertFile == "":
			bad("nats.tls.cert_file", "is required with nats.tls.key_file (a client certificate needs its key)")
		}
	}
	switch r := c.NATS.Replicas; {
	case r < 1 || r > MaxReplicas:
		bad("nats.replicas", "%d is out of range 1 to %d", r, MaxReplicas)
	case r != 1 && c.Embedded():
		bad("nats.replicas", "must be 1 with the embedded server (no nats.urls), got %d", r)
	}

	// grpc
	if problem := checkHostPort(c.GRPC.Listen, false); problem != "" {
		bad("grpc.listen", "%s", problem)
	}
	services := Services()
	for _, name := range slices.Sorted(maps.Keys(c.GRPC.Peers)) {
		path := "grpc.peers." + name
		if !slices.Contains(services, name) {
			bad(path, "unknown service %q (want one of %s)", name, strings.Join(services, ", "))
			continue
		}
		if problem := checkHostPort(c.GRPC.Peers[name], true); problem != "" {
			bad(path, "%s", problem)
		}
	}

	t := c.GRPC.TLS
	for _, f := range []struct{ key, path string }{
		{"grpc.tls.ca_file", t.CAFile}, {"grpc.tls.cert_file", t.CertFile}, {"grpc.tls.key_file", t.KeyFile},
	} {
		if f.path == "" {
			if t != (GRPCTLS{}) {
				bad(f.key, "is required with the other grpc.tls files (mutual TLS needs the CA, a certificate and its key)")
			}
		} else if problem := checkFile(f.path); problem != "" {
			bad(f.key, "%s", problem)
		}
	}

	// ops
	names := map[string]bool{}
	for i, op := range c.Ops.Operators {
		path := fmt.Sprintf("ops.operators[%d]", i)
		switch {
		case op.Name == "":
			bad(path+".name", "is required")
		case names[op.Name]:
			bad(path+".name", "%q is listed twice", op.Name)
		}
		names[op.Name] = true
		if b, err := hex.DecodeString(op.TokenSHA256); err != nil || len(b) != 32 {
			bad(path+".token_sha256", "must be the 64 hex digits alpctl operator-token prints")
		}
	}
	if c.Ops.TracePerMinute < 1 || c.Ops.TracePerMinute > 6000 {
		bad("ops.trace_per_minute", "%d is out of range 1 to 6000", c.Ops.TracePerMinute)
	}
	c.validateHTTP(bad)
	c.validateNLIP(bad)
	if w := c.Policy.Workers; w < 1 || w > 64 {
		bad("policy.workers", "%d is out of range 1 to 64", w)
	}
	c.validateLedger(bad)
	c.validateApprovals(bad)
	if f := c.Identity.FreshMaxAge; f < time.Second || f > time.Hour {
		bad("identity.fresh_max_age", "%s is out of range 1s to 1h", fmtDuration(f))
	}
	c.validateDCR(bad)
	c.validateFederation(bad)
	if c.Ops.TraceBurst < 1 || c.Ops.TraceBurst > 100 {
		bad("ops.trace_burst", "%d is out of range 1 to 100", c.Ops.TraceBurst)
	}

	// http.public_url and identity
	if u := c.HTTP.PublicURL; u != "" {
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" || (pu.Path != "" && pu.Path != "/") || pu.RawQuery != "" {
			bad("http.public_url", "%q is not scheme://host[:port] with http or https and no path", u)
		}
	}
	hosted := map[string]bool{}
	for _, t := range c.Broker.Tenants {
		hosted[t.Domain] = true
	}
	idpFor := map[string]bool{}
	for i, idp := range c.Identity.IdPs {
		path := fmt.Sprintf("identity.idps[%d]", i)
		switch {
		case !hosted[idp.Tenant]:
			bad(path+".tenant", "%q is not one of broker.tenants", idp.Tenant)
		case idpFor[idp.Tenant]:
			bad(path+".tenant", "%q already has an IdP", idp.Tenant)
		}
		idpFor[idp.Tenant] = true
		if iu, err := url.Parse(idp.Issuer); err != nil || (iu.Scheme != "https" && !(iu.Scheme == "http" && loopback.Host(iu.Hostname()))) || iu.Host == "" {
			bad(path+".issuer", "%q must be an https URL (http only on loopback)", idp.Issuer)
		}
		if idp.ClientID == "" {
			bad(path+".client_id", "is required")
		}
		if idp.ClientSecretFile != "" {
			if problem := checkFile(idp.ClientSecretFile); problem != "" {
				bad(path+".client_secret_file", "%s", problem)
			}
		}
		if len(idp.Scopes) > MaxIdPScopes {
			bad(path+".scopes", "at most %d extra scopes (got %d)", MaxIdPScopes, len(idp.Scopes))
		}
		seenScope := map[string]bool{}
		for j, sc := range idp.Scopes {
			spath := fmt.Sprintf("%s.scopes[%d]", path, j)
			switch {
			case len(sc) > maxIdPScopeLen || !alp.IsScopeToken(sc):
				bad(spath, "%q is not a scope token (1 to %d printable ASCII characters without space, '\"' or '\\')", sc, maxIdPScopeLen)
			case slices.Contains(alwaysRequestedScopes, sc):
				bad(spath, "%q is always requested; list only extra scopes", sc)
			case seenScope[sc]:
				bad(spath, "%q is listed twice", sc)
			}
			seenScope[sc] = true
		}
	}
	if tp := c.Identity.TestIdP; tp.Enabled {
		if problem := checkHostPort(tp.Listen, false); problem != "" {
			bad("identity.test_idp.listen", "%s", problem)
		} else if host, _, _ := net.SplitHostPort(tp.Listen); !loopback.Host(host) && !tp.ForceNonLoopback {
			bad("identity.test_idp.listen", "%q is not a loopback address: the test IdP accepts any password configured here; set force_non_loopback only if you mean it", tp.Listen)
		}
		if len(tp.Users) == 0 {
			bad("identity.test_idp.users", "at least one user is required")
		}
		users := map[string]bool{}
		for i, u := range tp.Users {
			upath := fmt.Sprintf("identity.test_idp.users[%d]", i)
			if u.Username == "" || strings.ContainsAny(u.Username, "@ \t") {
				bad(upath+".username", "%q must be a plain name (the address is name@tenant)", u.Username)
			} else if users[u.Username] {
				bad(upath+".username", "%q is listed twice", u.Username)
			}
			users[u.Username] = true
			if u.Password == "" {
				bad(upath+".password", "is required")
			}
		}
	}

	// keystore
	if c.Keystore.Backend != "file" {
		bad("keystore.backend", "%q is not supported (the only backend is \"file\")", c.Keystore.Backend)
	}
	if c.Keystore.KEKFile != "" {
		if c.Keystore.KEKFromEnv {
			bad("keystore.kek_file", "is set and so is %s; give the key-encryption key one way only", EnvKEK)
		} else if problem := checkFile(c.Keystore.KEKFile); problem != "" {
			bad("keystore.kek_file", "%s", problem)
		}
	}

	// log
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.Log.Level) {
		bad("log.level", "%q is not one of debug, info, warn, error", c.Log.Level)
	}
	if !slices.Contains([]string{"json", "text"}, c.Log.Format) {
		bad("log.format", "%q is not one of json, text", c.Log.Format)
	}

	// bus
	b := c.Bus
	if b.Duplicates < MinDuplicates {
		bad("bus.duplicates", "%s is below the minimum of %s", fmtDuration(b.Duplicates), fmtDuration(MinDuplicates))
	}
	if b.EventMaxAge != 0 && b.EventMaxAge < MinEventMaxAge {
		bad("bus.event_max_age", "%s is below the minimum of %s (0 means no limit)", fmtDuration(b.EventMaxAge), fmtDuration(MinEventMaxAge))
	}
	if b.InboxMaxAge != 0 && b.InboxMaxAge < MinEventMaxAge {
		bad("bus.inbox_max_age", "%s is below the minimum of %s (0 means no limit)", fmtDuration(b.InboxMaxAge), fmtDuration(MinEventMaxAge))
	}
	if b.WorkMaxAge <= 0 {
		bad("bus.work_max_age", "%s must be positive", fmtDuration(b.WorkMaxAge))
	}
	// JetStream refuses a stream whose dedupe window exceeds its MaxAge;
	// catch that here rather than when the first stream is created.
	if b.Duplicates >= MinDuplicates {
		if b.WorkMaxAge > 0 && b.Duplicates > b.WorkMaxAge {
			bad("bus.duplicates", "%s is longer than bus.work_max_age (%s); JetStream refuses a dedupe window longer than a stream's max age", fmtDuration(b.Duplicates), fmtDuration(b.WorkMaxAge))
		}
		if b.InboxMaxAge >= MinEventMaxAge && b.Duplicates > b.InboxMaxAge {
			bad("bus.duplicates", "%s is longer than bus.inbox_max_age (%s); JetStream refuses a dedupe window longer than a stream's max age", fmtDuration(b.Duplicates), fmtDuration(b.InboxMaxAge))
		}
		if b.EventMaxAge >= MinEventMaxAge && b.Duplicates > b.EventMaxAge {
			bad("bus.duplicates", "%s is longer than bus.event_max_age (%s); JetStream refuses a dedupe window longer than a stream's max age", fmtDuration(b.Duplicates), fmtDuration(b.EventMaxAge))
		}
	}
	if b.MaxDeliver < 1 || b.MaxDeliver > MaxMaxDeliver {
		bad("bus.max_deliver", "%d is out of range 1 to %d", b.MaxDeliver, MaxMaxDeliver)
	}
	if b.AckWait < MinAckWait {
		bad("bus.ack_wait", "%s is below the minimum of %s", fmtDuration(b.AckWait), fmtDuration(MinAckWait))
	}
	return fes
}

// validBrokerName reports whether name matches [A-Za-z0-9_-]{1,32}: safe
// inside NATS stream, bucket and consumer names.
func validBrokerName(name string) bool {
	if name == "" || len(name) > maxBrokerNameLen {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// checkDomain returns what is wrong with d as a tenant domain (the rule is
// alp.ValidateTenant's; the wording around it is this package's), or "".
func checkDomain(d string) string {
	var e *alp.Error
	if errors.As(alp.ValidateTenant(d), &e) {
		return e.Reason
	}
	return ""
}

// checkHostPort returns what is wrong with addr as host:port, or "".
// For an address to dial (needHost), the host is required and port 0 is
// refused; to listen, ":8080" (all interfaces) and port 0 are fine.
func checkHostPort(addr string, needHost bool) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Sprintf("%q is not host:port", addr)
	}
	if strings.ContainsAny(host, " \t/") {
		return fmt.Sprintf("%q: %q is not a host name or IP address", addr, host)
	}
	if needHost && host == "" {
		return fmt.Sprintf("%q has no host", addr)
	}
	n, err := strconv.Atoi(port)
	if err != nil || strings.ContainsAny(port, "+-") || n < 0 || n > 65535 {
		return fmt.Sprintf("%q: port must be a number from 0 to 65535", addr)
	}
	if needHost && n == 0 {
		return fmt.Sprintf("%q: port 0 cannot be dialled", addr)
	}
	return ""
}

// checkNATSURL returns what is wrong with s as a NATS server URL, or "".
// The URL is shown with any password redacted.
func checkNATSURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Sprintf("%q is not a URL", redactURL(s))
	}
	shown := s
	if u.User != nil {
		shown = u.Redacted()
	}
	if !strings.EqualFold(u.Scheme, "nats") && !strings.EqualFold(u.Scheme, "tls") {
		return fmt.Sprintf("%q is not a nats:// or tls:// URL", shown)
	}
	if u.Hostname() == "" {
		return fmt.Sprintf("%q has no host", shown)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Sprintf("%q: port must be a number from 1 to 65535", shown)
		}
	}
	return ""
}

// redactURL hides the user-info part of a string that did not parse as a
// URL, in case it holds a password.
func redactURL(s string) string {
	i := strings.Index(s, "://")
	j := strings.LastIndex(s, "@")
	if i >= 0 && j > i+3 {
		return s[:i+3] + "xxxxx" + s[j:]
	}
	return s
}

func checkFile(path string) string {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Sprintf("%q does not exist", path)
	case err != nil:
		return err.Error()
	case fi.IsDir():
		return fmt.Sprintf("%q is a directory, not a file", path)
	}
	return ""
}

// fmtDuration prints d without trailing zero units: "2m", not "2m0s".
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// validateHTTP checks the HTTP server's limits and timeouts.
func (c *Config) validateHTTP(bad func(path, format string, args ...any)) {
	h := c.HTTP
	for _, d := range []struct {
		path     string
		v        time.Duration
		min, max time.Duration
	}{
		{"http.read_header_timeout", h.ReadHeaderTimeout, 100 * time.Millisecond, 10 * time.Minute},
		{"http.read_timeout", h.ReadTimeout, 100 * time.Millisecond, time.Hour},
		{"http.write_timeout", h.WriteTimeout, 100 * time.Millisecond, time.Hour},
		{"http.idle_timeout", h.IdleTimeout, 100 * time.Millisecond, 24 * time.Hour},
	} {
		if d.v < d.min || d.v > d.max {
			bad(d.path, "%s is out of range %s to %s", fmtDuration(d.v), fmtDuration(d.min), fmtDuration(d.max))
		}
	}
	if h.ReadTimeout > 0 && h.ReadHeaderTimeout > h.ReadTimeout {
		bad("http.read_header_timeout", "%s is longer than http.read_timeout (%s), which covers the header too", fmtDuration(h.ReadHeaderTimeout), fmtDuration(h.ReadTimeout))
	}
	// A send waits for policy's decision before it answers: the answer
	// must still fit in the write timeout.
	if h.WriteTimeout > 0 && c.NLIP.DecisionWait >= h.WriteTimeout {
		bad("http.write_timeout", "%s must be longer than nlip.decision_wait (%s): a send answers after waiting that long", fmtDuration(h.WriteTimeout), fmtDuration(c.NLIP.DecisionWait))
	}
	if h.MaxHeaderBytes < 4<<10 || h.MaxHeaderBytes > 1<<20 {
		bad("http.max_header_bytes", "%d is out of range %d to %d", h.MaxHeaderBytes, 4<<10, 1<<20)
	}
	if h.MaxConnsPerAddress < 0 || h.MaxConnsPerAddress > 1_000_000 {
		bad("http.max_conns_per_address", "%d is out of range 0 (no cap) to 1000000", h.MaxConnsPerAddress)
	}
}

// validateNLIP checks the nlip section's ranges.
func (c *Config) validateNLIP(bad func(path, format string, args ...any)) {
	n := c.NLIP
	ints := []struct {
		path     string
		v        int
		min, max int
	}{
		{"nlip.max_message_bytes", n.MaxMessageBytes, 1024, 64 << 20},
		{"nlip.max_submessages", n.MaxSubmessages, 1, 10000},
		{"nlip.max_depth", n.MaxDepth, 1, 1000},
		{"nlip.agent_per_minute", n.AgentPerMinute, 1, 6_000_000},
		{"nlip.agent_burst", n.AgentBurst, 1, 1_000_000},
		{"nlip.person_per_minute", n.PersonPerMinute, 1, 6_000_000},
		{"nlip.person_burst", n.PersonBurst, 1, 1_000_000},
		{"nlip.tenant_per_minute", n.TenantPerMinute, 1, 60_000_000},
		{"nlip.tenant_burst", n.TenantBurst, 1, 10_000_000},
		{"nlip.ws_per_minute", n.WSPerMinute, 1, 6_000_000},
		{"nlip.ws_burst", n.WSBurst, 1, 1_000_000},
		{"nlip.ws_max_per_agent", n.WSMaxPerAgent, 1, 10_000},
		{"nlip.ws_max_per_person", n.WSMaxPerPerson, 1, 100_000},
		{"nlip.ws_read_buffer_bytes", n.WSReadBufferBytes, 64 << 10, 16 << 30},
		{"nlip.nmp_halt_percent", n.NMPHaltPercent, 1, 100},
	}
	for _, f := range ints {
		if f.v < f.min || f.v > f.max {
			bad(f.path, "%d is out of range %d to %d", f.v, f.min, f.max)
		}
	}
	if n.DecisionWait < 10*time.Millisecond || n.DecisionWait > time.Minute {
		bad("nlip.decision_wait", "%s is out of range 10ms to 1m", fmtDuration(n.DecisionWait))
	}
	if n.WSIdleTimeout < time.Second || n.WSIdleTimeout > 24*time.Hour {
		bad("nlip.ws_idle_timeout", "%s is out of range 1s to 24h", fmtDuration(n.WSIdleTimeout))
	}
	if n.WSReadTimeout < time.Second || n.WSReadTimeout > time.Hour {
		bad("nlip.ws_read_timeout", "%s is out of range 1s to 1h", fmtDuration(n.WSReadTimeout))
	}
	// Room for two messages at the size limit, or a WebSocket could never
	// take one while another arrives.
	if n.WSReadBufferBytes >= 64<<10 && n.WSReadBufferBytes < 2*n.MaxMessageBytes {
		bad("nlip.ws_read_buffer_bytes", "%d is less than twice nlip.max_message_bytes (%d)", n.WSReadBufferBytes, n.MaxMessageBytes)
	}
	for i, o := range n.AllowedOrigins {
		if _, err := path.Match(o, ""); err != nil || strings.TrimSpace(o) == "" || o == "*" {
			bad(fmt.Sprintf("nlip.allowed_origins[%d]", i), "%q is not a host pattern (path.Match syntax; \"*\" alone would allow every site)", o)
		}
	}
}

// validateApprovals checks the approvals section's ranges.
func (c *Config) validateApprovals(bad func(path, format string, args ...any)) {
	a := c.Approvals
	for _, e := range []struct {
		path string
		v    time.Duration
	}{
		{"approvals.expiry.connection_request", a.Expiry.ConnectionRequest}, {"approvals.expiry.commitment", a.Expiry.Commitment},
		{"approvals.expiry.confidential_fields", a.Expiry.ConfidentialFields}, {"approvals.expiry.standing_rule", a.Expiry.StandingRule},
	} {
		if e.v < time.Second || e.v > 366*24*time.Hour {
			bad(e.path, "%s is out of range 1s to 8784h (a year)", fmtDuration(e.v))
		}
	}
	if a.SweepEvery < 100*time.Millisecond || a.SweepEvery > 10*time.Minute {
		bad("approvals.sweep_every", "%s is out of range 100ms to 10m", fmtDuration(a.SweepEvery))
	}
	// The notifier checks URLs, addresses and times itself when alpd
	// starts (services/approvals/notify); here, what the file must say.
	n := a.Notifications
	for i, w := range n.Webhooks {
		if w.URL == "" || w.SecretFile == "" {
			bad(fmt.Sprintf("approvals.notifications.webhooks[%d]", i), "needs url and secret_file")
		}
	}
	if e := n.Email; e != nil && (e.Addr == "" || e.From == "") {
		bad("approvals.notifications.email", "needs addr and from")
	}
	if q := n.QuietHours; q != nil && q.TimeZone != "" {
		if _, err := time.LoadLocation(q.TimeZone); err != nil {
			bad("approvals.notifications.quiet_hours.time_zone", "%q is not a time zone: %v", q.TimeZone, err)
		}
	}
	if n.RetryMin < 10*time.Millisecond || n.RetryMin > n.RetryMax || n.RetryMax > time.Hour {
		bad("approvals.notifications.retry_min", "%s and retry_max %s must satisfy 10ms <= retry_min <= retry_max <= 1h", fmtDuration(n.RetryMin), fmtDuration(n.RetryMax))
	}
	if n.MaxAge < time.Minute || n.MaxAge > 30*24*time.Hour {
		bad("approvals.notifications.max_age", "%s is out of range 1m to 720h", fmtDuration(n.MaxAge))
	}
	if n.Digest < 0 || n.Digest > 24*time.Hour {
		bad("approvals.notifications.digest", "%s is out of range 0 (off) to 24h", fmtDuration(n.Digest))
	}
}

// validateLedger checks the ledger section's ranges.
func (c *Config) validateLedger(bad func(path, format string, args ...any)) {
	l := c.Ledger
	for _, f := range []struct {
		path     string
		v        int
		min, max int
	}{
		{"ledger.workers", l.Workers, 1, 64},
		{"ledger.max_batch", l.MaxBatch, 1, 10000},
		{"ledger.max_trees", l.MaxTrees, 16, 10_000_000},
		{"ledger.checkpoint_every", l.CheckpointEvery, 1, 1_000_000},
		{"ledger.max_exports", l.MaxExports, 1, 1000},
		{"ledger.max_exports_per_person", l.MaxExportsPerPerson, 1, max(1, l.MaxExports)},
	} {
		if f.v < f.min || f.v > f.max {
			bad(f.path, "%d is out of range %d to %d", f.v, f.min, f.max)
		}
	}
	if l.CheckpointInterval < 10*time.Millisecond || l.CheckpointInterval > time.Minute {
		bad("ledger.checkpoint_interval", "%s is out of range 10ms to 1m", fmtDuration(l.CheckpointInterval))
	}
	if l.SecretsCacheTTL < time.Second || l.SecretsCacheTTL > time.Hour {
		bad("ledger.secrets_cache_ttl", "%s is out of range 1s to 1h", fmtDuration(l.SecretsCacheTTL))
	}
	if l.ExportWriteTimeout < time.Second || l.ExportWriteTimeout > 10*time.Minute {
		bad("ledger.export_write_timeout", "%s is out of range 1s to 10m", fmtDuration(l.ExportWriteTimeout))
	}
}

// validateDCR checks the bounds of dynamic client registration.
func (c *Config) validateDCR(bad func(path, format string, args ...any)) {
	d := c.Identity.DCR
	if d.MaxUnusedClients < 1 || d.MaxUnusedClients > 1_000_000 {
		bad("identity.dcr.max_unused_clients", "%d is out of range 1 to 1000000", d.MaxUnusedClients)
	}
	if d.MaxUnusedClientsPerTenant < 1 || d.MaxUnusedClientsPerTenant > max(1, d.MaxUnusedClients) {
		bad("identity.dcr.max_unused_clients_per_tenant", "%d is out of range 1 to identity.dcr.max_unused_clients (%d)", d.MaxUnusedClientsPerTenant, d.MaxUnusedClients)
	}
	if d.UnusedClientTTL < time.Minute || d.UnusedClientTTL > 720*time.Hour {
		bad("identity.dcr.unused_client_ttl", "%s is out of range 1m to 720h", fmtDuration(d.UnusedClientTTL))
	}
	if d.SweepInterval < time.Second || d.SweepInterval > time.Hour {
		bad("identity.dcr.sweep_interval", "%s is out of range 1s to 1h", fmtDuration(d.SweepInterval))
	}
}

// Bounds of the federation section's durations.
var federationDurations = []struct {
	path     string
	get      func(Federation) time.Duration
	min, max time.Duration
}{
	{"federation.skew", func(f Federation) time.Duration { return f.Skew }, time.Second, time.Hour},
	{"federation.outbox_max_age", func(f Federation) time.Duration { return f.OutboxMaxAge }, time.Minute, 30 * 24 * time.Hour},
	{"federation.retry_min", func(f Federation) time.Duration { return f.RetryMin }, 10 * time.Millisecond, time.Minute},
	{"federation.retry_max", func(f Federation) time.Duration { return f.RetryMax }, 10 * time.Millisecond, 24 * time.Hour},
	// The protocol caps the use of published keys at 7 days.
	{"federation.key_cache_max_age", func(f Federation) time.Duration { return f.KeyCacheMaxAge }, time.Minute, 7 * 24 * time.Hour},
}

// validateFederation checks http.tls and the federation section. The
// rule on plain http: federation is HTTPS only, so plain http is either
// the one-machine dev flag (everything on loopback, or alpd refuses to
// start) or a broker that does not federate, which must not carry
// federation settings it would silently ignore.
func (c *Config) validateFederation(bad func(path, format string, args ...any)) {
	t := c.HTTP.TLS
	if t.Enabled() {
		for _, f := range []struct{ key, path, other string }{
			{"http.tls.cert_file", t.CertFile, "http.tls.key_file"}, {"http.tls.key_file", t.KeyFile, "http.tls.cert_file"},
		} {
			if f.path == "" {
				bad(f.key, "is required with %s (a certificate needs its key)", f.other)
			} else if problem := checkFile(f.path); problem != "" {
				bad(f.key, "%s", problem)
			}
		}
		if u := c.HTTP.PublicURL; strings.HasPrefix(strings.ToLower(u), "http://") {
			bad("http.public_url", "%q is plain http, but http.tls makes the listener serve HTTPS only; use https://", u)
		}
	}

	f := c.Federation
	if f.BrokerName != "" {
		if problem := checkDomain(f.BrokerName); problem != "" {
			bad("federation.broker_name", "%q %s (it must be this broker's DNS name)", f.BrokerName, problem)
		}
	}
	for _, host := range slices.Sorted(maps.Keys(f.Resolve)) {
		path := "federation.resolve." + host
		if problem := checkDomain(host); problem != "" {
			bad(path, "%q %s (the keys are host names, without port)", host, problem)
			continue
		}
		target := f.Resolve[host]
		if problem := checkHostPort(target, true); problem != "" {
			bad(path, "%s", problem)
			continue
		}
		if h, _, _ := net.SplitHostPort(target); net.ParseIP(h) == nil || !net.ParseIP(h).IsLoopback() {
			bad(path, "%q is not a loopback ip:port: federation.resolve only points names at this machine (several brokers on one host)", target)
		}
	}
	if f.CAFile != "" {
		if problem := checkFile(f.CAFile); problem != "" {
			bad("federation.ca_file", "%s", problem)
		}
	}
	for _, d := range federationDurations {
		if v := d.get(f); v < d.min || v > d.max {
			bad(d.path, "%s is out of range %s to %s", fmtDuration(v), fmtDuration(d.min), fmtDuration(d.max))
		}
	}
	if f.RetryMin > 0 && f.RetryMax < f.RetryMin {
		bad("federation.retry_max", "%s is shorter than federation.retry_min (%s)", fmtDuration(f.RetryMax), fmtDuration(f.RetryMin))
	}
	if f.RetryMax > f.OutboxMaxAge && f.OutboxMaxAge >= time.Minute {
		bad("federation.retry_max", "%s is longer than federation.outbox_max_age (%s): a message would expire between two attempts", fmtDuration(f.RetryMax), fmtDuration(f.OutboxMaxAge))
	}
	if _, _, err := parseRate(f.StrangerRate); err != nil {
		bad("federation.stranger_rate", "%v", err)
	}
	if f.Senders < 1 || f.Senders > 1024 {
		bad("federation.senders", "%d is out of range 1 to 1024", f.Senders)
	} else if f.PerRemote < 1 || f.PerRemote > f.Senders {
		bad("federation.per_remote", "%d is out of range 1 to federation.senders (%d)", f.PerRemote, f.Senders)
	}

	public := c.PublicURL()
	plain := strings.HasPrefix(public, "http://")
	switch {
	case f.AllowPlainHTTPLoopback && !loopback.URL(public):
		bad("federation.allow_plain_http_loopback", "is set, but http.public_url %q is not a loopback address: plain-http federation is only for brokers on one machine", public)
	case plain && !f.AllowPlainHTTPLoopback:
		var set []string
		if f.BrokerName != "" {
			set = append(set, "broker_name")
		}
		if len(f.Resolve) > 0 {
			set = append(set, "resolve")
		}
		if f.CAFile != "" {
			set = append(set, "ca_file")
		}
		if f.AllowPrivateTargets {
			set = append(set, "allow_private_targets")
		}
		if len(set) > 0 {
			bad("http.public_url", "%q is plain http, so this broker does not federate (federation is HTTPS only), but federation.%s is set: serve HTTPS (http.tls, or TLS in front and an https public_url), or on one machine set federation.allow_plain_http_loopback",
				public, strings.Join(set, ", federation."))
		}
	}
	if c.FederationEnabled() && f.BrokerName == "" {
		if name := c.BrokerName(); checkDomain(name) != "" {
			bad("federation.broker_name", "is not set and the host of http.public_url, %q, is not a DNS name; set federation.broker_name to this broker's DNS name", name)
		}
	}
}

// parseRate parses "N/s", "N/min" or "N/h" (N from 1 to 1000000).
func parseRate(s string) (n int, per time.Duration, err error) {
	num, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	n, nerr := strconv.Atoi(strings.TrimSpace(num))
	switch strings.TrimSpace(unit) {
	case "s":
		per = time.Second
	case "min":
		per = time.Minute
	case "h":
		per = time.Hour
	default:
		ok = false
	}
	if !ok || nerr != nil || strings.ContainsAny(num, "+-") || n < 1 || n > 1_000_000 {
		return 0, 0, fmt.Errorf("%q is not a rate such as \"5/min\" (1 to 1000000 per s, min or h)", s)
	}
	return n, per, nil
}
