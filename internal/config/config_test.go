package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

type envMap map[string]string

func (m envMap) get(k string) string { return m[k] }

// valid is the smallest valid configuration: the defaults plus a tenant.
func valid() Config {
	c := Default()
	c.Broker.Tenants = []Tenant{{Domain: "example.org"}}
	return c
}

// errs splits a joined error into its parts.
func errs(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q\ndoes not contain %q", err, p)
		}
	}
}

func TestDefaults(t *testing.T) {
	d := Default()
	err := d.Validate()
	if got := errs(err); len(got) != 1 || !strings.Contains(got[0].Error(), "config: broker.tenants:") {
		t.Fatalf("Default().Validate() = %v, want exactly the missing-tenant error", err)
	}
	c := valid()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults with a tenant: %v", err)
	}
	if !c.Embedded() {
		t.Error("Embedded() = false with no URLs")
	}
	if got, want := c.KeystorePath(), filepath.Join("./data", "keystore.sealed"); got != want {
		t.Errorf("KeystorePath() = %q, want %q", got, want)
	}
	c.Keystore.Path = "/secure/keys.sealed"
	if got := c.KeystorePath(); got != "/secure/keys.sealed" {
		t.Errorf("KeystorePath() with keystore.path = %q", got)
	}
	c.NATS.URLs = []string{"nats://n1:4222"}
	if c.Embedded() {
		t.Error("Embedded() = true with a URL")
	}
}

// TestValidateRules has one row per rule: each bad value must give
// exactly one error, naming its key path.
func TestValidateRules(t *testing.T) {
	dir := t.TempDir()
	kek := writeFile(t, "kek", "a2V5\n")
	missing := filepath.Join(dir, "missing")

	tests := []struct {
		name   string
		mutate func(c *Config)
		want   string // "config: <key path>: ..." prefix or full text
		not    string // must not appear (e.g. a password)
	}{
		{"broker name with space", func(c *Config) { c.Broker.Name = "my broker" }, `config: broker.name: "my broker"`, ""},
		{"broker name too long", func(c *Config) { c.Broker.Name = strings.Repeat("a", 33) }, "config: broker.name:", ""},
		{"broker name empty", func(c *Config) { c.Broker.Name = "" }, "config: broker.name:", ""},
		{"broker name dot", func(c *Config) { c.Broker.Name = "a.b" }, "config: broker.name:", ""},
		{"no tenants", func(c *Config) { c.Broker.Tenants = nil }, "config: broker.tenants: at least one", ""},
		{"domain uppercase", func(c *Config) { c.Broker.Tenants[0].Domain = "Example.org" }, `config: broker.tenants[0].domain: "Example.org" must be lowercase`, ""},
		{"domain empty", func(c *Config) { c.Broker.Tenants[0].Domain = "" }, "config: broker.tenants[0].domain: \"\" is empty", ""},
		{"domain underscore", func(c *Config) { c.Broker.Tenants[0].Domain = "ex_ample.org" }, "config: broker.tenants[0].domain:", ""},
		{"domain hyphen edge", func(c *Config) { c.Broker.Tenants[0].Domain = "-example.org" }, "config: broker.tenants[0].domain:", ""},
		{"domain empty label", func(c *Config) { c.Broker.Tenants[0].Domain = "example..org" }, "config: broker.tenants[0].domain:", ""},
		{"domain trailing dot", func(c *Config) { c.Broker.Tenants[0].Domain = "example.org." }, "config: broker.tenants[0].domain:", ""},
		{"domain long label", func(c *Config) { c.Broker.Tenants[0].Domain = strings.Repeat("a", 64) + ".org" }, "config: broker.tenants[0].domain:", ""},
		{"domain IP", func(c *Config) { c.Broker.Tenants[0].Domain = "10.0.0.1" }, "config: broker.tenants[0].domain: \"10.0.0.1\" is an IP address", ""},
		{"domain unicode", func(c *Config) { c.Broker.Tenants[0].Domain = "bücher.example" }, "xn--", ""},
		{"domain duplicate", func(c *Config) {
			c.Broker.Tenants = append(c.Broker.Tenants, Tenant{"other.org"}, Tenant{"example.org"})
		}, `config: broker.tenants[2].domain: "example.org" is already listed as broker.tenants[0]`, ""},
		{"data dir empty", func(c *Config) { c.DataDir = "" }, "config: data_dir:", ""},
		{"http addr no port", func(c *Config) { c.HTTP.Addr = "localhost" }, `config: http.addr: "localhost" is not host:port`, ""},
		{"http addr port range", func(c *Config) { c.HTTP.Addr = "127.0.0.1:65536" }, "config: http.addr:", ""},
		{"http addr port name", func(c *Config) { c.HTTP.Addr = "127.0.0.1:http" }, "config: http.addr:", ""},
		{"http read timeout zero", func(c *Config) { c.HTTP.ReadTimeout = 0 }, "config: http.read_timeout: 0s is out of range 100ms to 1h", ""},
		{"http idle timeout zero", func(c *Config) { c.HTTP.IdleTimeout = 0 }, "config: http.idle_timeout:", ""},
		{"http header timeout over read", func(c *Config) { c.HTTP.ReadHeaderTimeout = time.Minute }, "config: http.read_header_timeout: 1m is longer than http.read_timeout", ""},
		{"http write timeout under the decision wait", func(c *Config) { c.HTTP.WriteTimeout = 2 * time.Second },
			"config: http.write_timeout: 2s must be longer than nlip.decision_wait (3s)", ""},
		{"http header bytes", func(c *Config) { c.HTTP.MaxHeaderBytes = 100 }, "config: http.max_header_bytes: 100 is out of range", ""},
		{"http conns negative", func(c *Config) { c.HTTP.MaxConnsPerAddress = -1 }, "config: http.max_conns_per_address:", ""},
		{"nats url scheme", func(c *Config) {
			c.NATS.URLs = []string{"nats://a:4222", "ftp://x"}
			c.NATS.Replicas = 1
		}, `config: nats.urls[1]: "ftp://x" is not a nats:// or tls:// URL`, ""},
		{"nats url no scheme", func(c *Config) { c.NATS.URLs = []string{"localhost:4222"} }, "config: nats.urls[0]:", ""},
		{"nats url no host", func(c *Config) { c.NATS.URLs = []string{"nats://"} }, "config: nats.urls[0]: \"nats://\" has no host", ""},
		{"nats url bad port, password hidden", func(c *Config) { c.NATS.URLs = []string{"nats://u:s3cret@a:99999"} }, "config: nats.urls[0]:", "s3cret"},
		{"nats url unparsable, password hidden", func(c *Config) { c.NATS.URLs = []string{"nats://u:s3cret@a:4x22"} }, "config: nats.urls[0]: \"nats://xxxxx@a:4x22\" is not a URL", "s3cret"},
		{"nats listen with urls", func(c *Config) {
			c.NATS.URLs = []string{"nats://a:4222"}
			c.NATS.Listen = "127.0.0.1:4222"
		}, "config: nats.listen: is only for the embedded server", ""},
		{"nats listen bad", func(c *Config) { c.NATS.Listen = "4222" }, "config: nats.listen:", ""},
		{"nats sync interval with urls", func(c *Config) {
			c.NATS.URLs = []string{"nats://a:4222"}
			c.NATS.SyncInterval = "1s"
		}, "config: nats.sync_interval: is only for the embedded server", ""},
		{"nats sync interval word", func(c *Config) { c.NATS.SyncInterval = "never" },
			`config: nats.sync_interval: "never" is neither "always" nor a duration`, ""},
		{"nats sync interval too short", func(c *Config) { c.NATS.SyncInterval = "1ms" },
			"config: nats.sync_interval: 1ms is out of range 10ms to 2m", ""},
		{"nats credentials missing", func(c *Config) { c.NATS.CredentialsFile = missing }, "config: nats.credentials_file: \"" + missing + "\" does not exist", ""},
		{"nats credentials is dir", func(c *Config) { c.NATS.CredentialsFile = dir }, "config: nats.credentials_file:", ""},
		{"nkey seed embedded", func(c *Config) { c.NATS.NKeySeedFile = kek }, "config: nats.nkey_seed_file: is for an external NATS", ""},
		{"nkey seed missing", func(c *Config) {
			c.NATS.URLs = []string{"nats://a:4222"}
			c.NATS.NKeySeedFile = missing
		}, "config: nats.nkey_seed_file: \"" + missing + "\" does not exist", ""},
		{"nkey seed and credentials", func(c *Config) {
			c.NATS.URLs = []string{"nats://a:4222"}
			c.NATS.NKeySeedFile = kek
			c.NATS.CredentialsFile = kek
		}, "config: nats.nkey_seed_file: is set and so is nats.credentials_file", ""},
		{"nats tls ca embedded", func(c *Config) { c.NATS.TLS.CAFile = kek }, "config: nats.tls.ca_file: is for an external NATS", ""},
		{"nats tls ca missing", func(c *Config) {
			c.NATS.URLs = []string{"tls://a:4222"}
			c.NATS.TLS.CAFile = missing
		}, "config: nats.tls.ca_file: \"" + missing + "\" does not exist", ""},
		{"nats tls ca is dir", func(c *Config) {
			c.NATS.URLs = []string{"tls://a:4222"}
			c.NATS.TLS.CAFile = dir
		}, "config: nats.tls.ca_file:", ""},
		{"nats tls cert without key", func(c *Config) {
			c.NATS.URLs = []string{"tls://a:4222"}
			c.NATS.TLS.CertFile = kek
		}, "config: nats.tls.key_file: is required with nats.tls.cert_file", ""},
		{"nats tls key without cert", func(c *Config) {
			c.NATS.URLs = []string{"tls://a:4222"}
			c.NATS.TLS.KeyFile = kek
		}, "config: nats.tls.cert_file: is required with nats.tls.key_file", ""},
		{"nats tls key missing", func(c *Config) {
			c.NATS.URLs = []string{"tls://a:4222"}
			c.NATS.TLS.CertFile = kek
			c.NATS.TLS.KeyFile = missing
		}, "config: nats.tls.key_file: \"" + missing + "\" does not exist", ""},
		{"nats tls cert embedded", func(c *Config) {
			c.NATS.TLS.CertFile = kek
			c.NATS.Listen = "127.0.0.1:4222"
		}, "config: nats.tls.cert_file: is for an external NATS", "nats.tls.key_file"},
		{"grpc tls partial", func(c *Config) { c.GRPC.TLS.CertFile, c.GRPC.TLS.KeyFile = kek, kek }, "config: grpc.tls.ca_file: is required with the other grpc.tls files", ""},
		{"grpc tls missing file", func(c *Config) {
			c.GRPC.TLS = GRPCTLS{CAFile: kek, CertFile: kek, KeyFile: missing}
		}, "config: grpc.tls.key_file: \"" + missing + "\" does not exist", ""},
		{"operator without name", func(c *Config) {
			c.Ops.Operators = []Operator{{TokenSHA256: strings.Repeat("a", 64)}}
		}, "config: ops.operators[0].name: is required", ""},
		{"operator twice", func(c *Config) {
			c.Ops.Operators = []Operator{{"ana", strings.Repeat("a", 64)}, {"ana", strings.Repeat("b", 64)}}
		}, `config: ops.operators[1].name: "ana" is listed twice`, ""},
		{"operator bad hash", func(c *Config) {
			c.Ops.Operators = []Operator{{"ana", "abc"}}
		}, "config: ops.operators[0].token_sha256: must be the 64 hex digits", ""},
		{"trace rate zero", func(c *Config) { c.Ops.TracePerMinute = 0 }, "config: ops.trace_per_minute: 0 is out of range", ""},
		{"ws sockets per agent zero", func(c *Config) { c.NLIP.WSMaxPerAgent = 0 }, "config: nlip.ws_max_per_agent: 0 is out of range", ""},
		{"ws sockets per person zero", func(c *Config) { c.NLIP.WSMaxPerPerson = 0 }, "config: nlip.ws_max_per_person: 0 is out of range", ""},
		{"ws read timeout", func(c *Config) { c.NLIP.WSReadTimeout = 0 }, "config: nlip.ws_read_timeout: 0s is out of range 1s to 1h", ""},
		{"ws read buffer under two messages", func(c *Config) { c.NLIP.WSReadBufferBytes = 1 << 20 },
			"config: nlip.ws_read_buffer_bytes: 1048576 is less than twice nlip.max_message_bytes (1048576)", ""},
		{"trace burst big", func(c *Config) { c.Ops.TraceBurst = 1000 }, "config: ops.trace_burst: 1000 is out of range", ""},
		{"public url with path", func(c *Config) { c.HTTP.PublicURL = "https://b.example/alpd" }, "config: http.public_url:", ""},
		{"idp for unknown tenant", func(c *Config) {
			c.Identity.IdPs = []IdP{{Tenant: "other.org", Issuer: "https://idp.example", ClientID: "x"}}
		}, `config: identity.idps[0].tenant: "other.org" is not one of broker.tenants`, ""},
		{"idp http issuer", func(c *Config) {
			c.Identity.IdPs = []IdP{{Tenant: "example.org", Issuer: "http://idp.example", ClientID: "x"}}
		}, "config: identity.idps[0].issuer:", ""},
		{"idp no client", func(c *Config) {
			c.Identity.IdPs = []IdP{{Tenant: "example.org", Issuer: "https://idp.example"}}
		}, "config: identity.idps[0].client_id: is required", ""},
		{"idp scope openid", func(c *Config) {
			c.Identity.IdPs = []IdP{{Tenant: "example.org", Issuer: "https://idp.example", ClientID: "x", Scopes: []string{"groups", "openid"}}}
		}, `config: identity.idps[0].scopes[1]: "openid" is always requested`, ""},
		{"idp scope twice", func(c *Config) {
			c.Identity.IdPs = []IdP{{Tenant: "example.org", Issuer: "https://idp.example", ClientID: "x", Scopes: []string{"groups", "groups"}}}
		}, `config: identity.idps[0].scopes[1]: "groups" is listed twice`, ""},
		{"idp scope with space", func(c *Config) {
			c.Identity.IdPs = []IdP{{Tenant: "example.org", Issuer: "https://idp.example", ClientID: "x", Scopes: []string{"groups roles"}}}
		}, `config: identity.idps[0].scopes[0]: "groups roles" is not a scope token`, ""},
		{"idp scope empty", func(c *Config) {
			c.Identity.IdPs = []IdP{{Tenant: "example.org", Issuer: "https://idp.example", ClientID: "x", Scopes: []string{""}}}
		}, `config: identity.idps[0].scopes[0]: "" is not a scope token`, ""},
		{"idp too many scopes", func(c *Config) {
			var many []string
			for i := range MaxIdPScopes + 1 {
				many = append(many, fmt.Sprintf("s%d", i))
			}
			c.Identity.IdPs = []IdP{{Tenant: "example.org", Issuer: "https://idp.example", ClientID: "x", Scopes: many}}
		}, "config: identity.idps[0].scopes: at most 16 extra scopes (got 17)", ""},
		{"test idp public", func(c *Config) {
			c.Identity.TestIdP = TestIdP{Enabled: true, Listen: "0.0.0.0:9000", Users: []TestUser{{"ana", "pw", nil}}}
		}, "config: identity.test_idp.listen:", ""},
		{"test idp no users", func(c *Config) { c.Identity.TestIdP.Enabled = true }, "config: identity.test_idp.users: at least one", ""},
		{"test idp user with @", func(c *Config) {
			c.Identity.TestIdP = TestIdP{Enabled: true, Listen: "127.0.0.1:0", Users: []TestUser{{"ana@x", "pw", nil}}}
		}, "config: identity.test_idp.users[0].username:", ""},
		{"replicas zero", func(c *Config) {
			c.NATS.URLs = []string{"nats://a:4222"}
			c.NATS.Replicas = 0
		}, "config: nats.replicas: 0 is out of range 1 to 5", ""},
		{"replicas six", func(c *Config) {
			c.NATS.URLs = []string{"nats://a:4222"}
			c.NATS.Replicas = 6
		}, "config: nats.replicas: 6 is out of range", ""},
		{"replicas embedded", func(c *Config) { c.NATS.Replicas = 3 }, "config: nats.replicas: must be 1 with the embedded server", ""},
		{"grpc listen bad", func(c *Config) { c.GRPC.Listen = "9090" }, "config: grpc.listen:", ""},
		{"grpc peer unknown service", func(c *Config) { c.GRPC.Peers = map[string]string{"identity": "h:1", "mailer": "h:2"} }, `config: grpc.peers.mailer: unknown service "mailer"`, ""},
		{"grpc peer bad addr", func(c *Config) { c.GRPC.Peers = map[string]string{"ledger": "ledger"} }, "config: grpc.peers.ledger:", ""},
		{"grpc peer no host", func(c *Config) { c.GRPC.Peers = map[string]string{"ledger": ":9091"} }, "config: grpc.peers.ledger: \":9091\" has no host", ""},
		{"grpc peer port 0", func(c *Config) { c.GRPC.Peers = map[string]string{"ledger": "h:0"} }, "config: grpc.peers.ledger:", ""},
		{"policy workers 0", func(c *Config) { c.Policy.Workers = 0 }, "config: policy.workers: 0 is out of range 1 to 64", ""},
		{"policy workers 65", func(c *Config) { c.Policy.Workers = 65 }, "config: policy.workers: 65 is out of range 1 to 64", ""},
		{"keystore backend", func(c *Config) { c.Keystore.Backend = "vault" }, `config: keystore.backend: "vault" is not supported`, ""},
		{"keystore two kek sources", func(c *Config) {
			c.Keystore.KEKFile = kek
			c.Keystore.KEKFromEnv = true
		}, "config: keystore.kek_file: is set and so is ALPD_KEK", ""},
		{"keystore kek file missing", func(c *Config) { c.Keystore.KEKFile = missing }, "config: keystore.kek_file: \"" + missing + "\" does not exist", ""},
		{"log level", func(c *Config) { c.Log.Level = "verbose" }, `config: log.level: "verbose" is not one of`, ""},
		{"log level case", func(c *Config) { c.Log.Level = "INFO" }, "config: log.level:", ""},
		{"log format", func(c *Config) { c.Log.Format = "xml" }, `config: log.format: "xml" is not one of json, text`, ""},
		{"bus duplicates below 1s", func(c *Config) { c.Bus.Duplicates = 500 * time.Millisecond }, "config: bus.duplicates: 500ms is below the minimum of 1s", ""},
		{"bus duplicates over work max age", func(c *Config) {
			c.Bus.WorkMaxAge = time.Hour
			c.Bus.Duplicates = 2 * time.Hour
		}, "config: bus.duplicates: 2h is longer than bus.work_max_age (1h)", ""},
		{"bus duplicates over event max age", func(c *Config) {
			c.Bus.EventMaxAge = time.Hour
			c.Bus.Duplicates = 90 * time.Minute
		}, "config: bus.duplicates: 1h30m is longer than bus.event_max_age (1h)", ""},
		{"bus event max age below 1h", func(c *Config) { c.Bus.EventMaxAge = 30 * time.Minute }, "config: bus.event_max_age: 30m is below the minimum of 1h", ""},
		{"bus event max age negative", func(c *Config) { c.Bus.EventMaxAge = -time.Hour }, "config: bus.event_max_age:", ""},
		{"bus work max age zero", func(c *Config) { c.Bus.WorkMaxAge = 0 }, "config: bus.work_max_age: 0s must be positive", ""},
		{"bus max deliver zero", func(c *Config) { c.Bus.MaxDeliver = 0 }, "config: bus.max_deliver: 0 is out of range 1 to 100", ""},
		{"bus max deliver 101", func(c *Config) { c.Bus.MaxDeliver = 101 }, "config: bus.max_deliver: 101 is out of range", ""},
		{"bus ack wait below 1s", func(c *Config) { c.Bus.AckWait = 999 * time.Millisecond }, "config: bus.ack_wait: 999ms is below the minimum of 1s", ""},
		{"ledger max exports zero", func(c *Config) { c.Ledger.MaxExports, c.Ledger.MaxExportsPerPerson = 0, 1 }, "config: ledger.max_exports: 0 is out of range 1 to 1000", ""},
		{"ledger exports per person over max", func(c *Config) { c.Ledger.MaxExportsPerPerson = 5 }, "config: ledger.max_exports_per_person: 5 is out of range 1 to 4", ""},
		{"ledger export write timeout", func(c *Config) { c.Ledger.ExportWriteTimeout = 0 }, "config: ledger.export_write_timeout: 0s is out of range 1s to 10m", ""},
		{"approvals expiry zero", func(c *Config) { c.Approvals.Expiry.Commitment = 0 }, "config: approvals.expiry.commitment: 0s is out of range 1s to 8784h (a year)", ""},
		{"approvals sweep too slow", func(c *Config) { c.Approvals.SweepEvery = time.Hour }, "config: approvals.sweep_every: 1h is out of range 100ms to 10m", ""},
		{"dcr max unused zero", func(c *Config) { c.Identity.DCR.MaxUnusedClients, c.Identity.DCR.MaxUnusedClientsPerTenant = 0, 1 }, "config: identity.dcr.max_unused_clients: 0 is out of range", ""},
		{"dcr per tenant over global", func(c *Config) { c.Identity.DCR.MaxUnusedClientsPerTenant = 20000 }, "config: identity.dcr.max_unused_clients_per_tenant: 20000 is out of range 1 to identity.dcr.max_unused_clients (10000)", ""},
		{"dcr ttl below 1m", func(c *Config) { c.Identity.DCR.UnusedClientTTL = time.Second }, "config: identity.dcr.unused_client_ttl: 1s is out of range 1m to 720h", ""},
		{"dcr sweep interval zero", func(c *Config) { c.Identity.DCR.SweepInterval = 0 }, "config: identity.dcr.sweep_interval: 0s is out of range 1s to 1h", ""},
		// http.tls
		{"http tls cert without key", func(c *Config) { c.HTTP.TLS.CertFile = kek; c.Federation.BrokerName = "b.example.org" }, "config: http.tls.key_file: is required with http.tls.cert_file", ""},
		{"http tls key without cert", func(c *Config) { c.HTTP.TLS.KeyFile = kek; c.Federation.BrokerName = "b.example.org" }, "config: http.tls.cert_file: is required with http.tls.key_file", ""},
		{"http tls cert missing", func(c *Config) {
			c.HTTP.TLS = HTTPTLS{CertFile: missing, KeyFile: kek}
			c.Federation.BrokerName = "b.example.org"
		}, "config: http.tls.cert_file: \"" + missing + "\" does not exist", ""},
		{"http tls with a plain public url", func(c *Config) {
			c.HTTP.TLS = HTTPTLS{CertFile: kek, KeyFile: kek}
			c.HTTP.PublicURL = "http://broker.example.org"
		}, `config: http.public_url: "http://broker.example.org" is plain http, but http.tls`, ""},
		// federation
		{"federation broker name not a DNS name", func(c *Config) {
			c.HTTP.PublicURL = "https://broker.example.org"
			c.Federation.BrokerName = "Broker.Example.org"
		}, `config: federation.broker_name: "Broker.Example.org" must be lowercase`, ""},
		{"federation broker name an IP", func(c *Config) {
			c.HTTP.PublicURL = "https://broker.example.org"
			c.Federation.BrokerName = "10.0.0.1"
		}, `config: federation.broker_name: "10.0.0.1" is an IP address`, ""},
		{"federation derived broker name an IP", func(c *Config) { c.HTTP.PublicURL = "https://10.1.2.3:8443" },
			`config: federation.broker_name: is not set and the host of http.public_url, "10.1.2.3", is not a DNS name`, ""},
		{"federation resolve to a remote address", func(c *Config) {
			c.HTTP.PublicURL = "https://broker.example.org"
			c.Federation.Resolve = map[string]string{"b.example": "10.0.0.3:443"}
		}, `config: federation.resolve.b.example: "10.0.0.3:443" is not a loopback ip:port`, ""},
		{"federation resolve to a loopback name", func(c *Config) {
			c.HTTP.PublicURL = "https://broker.example.org"
			c.Federation.Resolve = map[string]string{"b.example": "localhost:443"}
		}, `config: federation.resolve.b.example: "localhost:443" is not a loopback ip:port`, ""},
		{"federation resolve without port", func(c *Config) {
			c.HTTP.PublicURL = "https://broker.example.org"
			c.Federation.Resolve = map[string]string{"b.example": "127.0.0.3"}
		}, `config: federation.resolve.b.example: "127.0.0.3" is not host:port`, ""},
		{"federation resolve key with port", func(c *Config) {
			c.HTTP.PublicURL = "https://broker.example.org"
			c.Federation.Resolve = map[string]string{"b.example:443": "127.0.0.3:443"}
		}, `config: federation.resolve.b.example:443: "b.example:443"`, ""},
		{"federation ca file missing", func(c *Config) {
			c.HTTP.PublicURL = "https://broker.example.org"
			c.Federation.CAFile = missing
		}, "config: federation.ca_file: \"" + missing + "\" does not exist", ""},
		{"federation plain http flag off loopback", func(c *Config) {
			c.HTTP.PublicURL = "http://broker.example.org:8080"
			c.Federation.AllowPlainHTTPLoopback = true
			c.Federation.BrokerName = "broker.example.org"
		}, `config: federation.allow_plain_http_loopback: is set, but http.public_url "http://broker.example.org:8080" is not a loopback address`, ""},
		{"federation plain http flag with an https public url off loopback", func(c *Config) {
			c.HTTP.PublicURL = "https://broker.example.org"
			c.Federation.AllowPlainHTTPLoopback = true
		}, `config: federation.allow_plain_http_loopback: is set, but http.public_url "https://broker.example.org"`, ""},
		{"federation plain http flag on loopback needs a name", func(c *Config) {
			c.HTTP.PublicURL = "http://127.0.0.2:8080"
			c.Federation.AllowPlainHTTPLoopback = true
		}, `config: federation.broker_name: is not set and the host of http.public_url, "127.0.0.2"`, ""},
		{"federation settings over plain http", func(c *Config) {
			c.Federation.Resolve = map[string]string{"b.example": "127.0.0.3:443"}
			c.Federation.CAFile = kek
		}, `config: http.public_url: "http://127.0.0.1:8080" is plain http, so this broker does not federate (federation is HTTPS only), but federation.resolve, federation.ca_file is set`, ""},
		{"federation broker name over plain http", func(c *Config) { c.Federation.BrokerName = "broker.example.org" },
			`config: http.public_url: "http://127.0.0.1:8080" is plain http`, ""},
		{"federation skew zero", func(c *Config) { c.Federation.Skew = 0 }, "config: federation.skew: 0s is out of range 1s to 1h", ""},
		{"federation outbox max age long", func(c *Config) { c.Federation.OutboxMaxAge = 800 * time.Hour }, "config: federation.outbox_max_age: 800h is out of range 1m to 720h", ""},
		{"federation retry min zero", func(c *Config) { c.Federation.RetryMin = 0 }, "config: federation.retry_min: 0s is out of range 10ms to 1m", ""},
		{"federation retry max under min", func(c *Config) { c.Federation.RetryMax = 500 * time.Millisecond },
			"config: federation.retry_max: 500ms is shorter than federation.retry_min (1s)", ""},
		{"federation retry max over outbox age", func(c *Config) { c.Federation.OutboxMaxAge = 2 * time.Minute },
			"config: federation.retry_max: 5m is longer than federation.outbox_max_age (2m)", ""},
		{"federation key cache over 7 days", func(c *Config) { c.Federation.KeyCacheMaxAge = 169 * time.Hour },
			"config: federation.key_cache_max_age: 169h is out of range 1m to 168h", ""},
		{"federation stranger rate unit", func(c *Config) { c.Federation.StrangerRate = "5/day" }, `config: federation.stranger_rate: "5/day" is not a rate`, ""},
		{"federation stranger rate zero", func(c *Config) { c.Federation.StrangerRate = "0/min" }, `config: federation.stranger_rate: "0/min" is not a rate`, ""},
		{"federation senders zero", func(c *Config) { c.Federation.Senders = 0 }, "config: federation.senders: 0 is out of range 1 to 1024", ""},
		{"federation per remote over senders", func(c *Config) { c.Federation.PerRemote = 65 },
			"config: federation.per_remote: 65 is out of range 1 to federation.senders (64)", ""},
		{"federation stranger rate empty", func(c *Config) { c.Federation.StrangerRate = "" }, `config: federation.stranger_rate: "" is not a rate`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.mutate(&c)
			err := c.Validate()
			got := errs(err)
			if len(got) != 1 {
				t.Fatalf("got %d errors, want 1:\n%v", len(got), err)
			}
			msg := got[0].Error()
			if !strings.HasPrefix(msg, tt.want) && !strings.Contains(msg, tt.want) {
				t.Errorf("error %q\nwant it to contain %q", msg, tt.want)
			}
			if !strings.HasPrefix(msg, "config: ") {
				t.Errorf("error %q does not start with \"config: \"", msg)
			}
			if tt.not != "" && strings.Contains(msg, tt.not) {
				t.Errorf("error %q shows %q", msg, tt.not)
			}
		})
	}
}

// TestValidateAccepts checks values at the edges of the rules are valid.
func TestValidateAccepts(t *testing.T) {
	kek := writeFile(t, "kek", "a2V5\n")
	creds := writeFile(t, "nats.creds", "x")
	tests := []struct {
		name   string
		mutate func(c *Config)
	}{
		{"broker name 32 chars", func(c *Config) { c.Broker.Name = strings.Repeat("A_-9", 8) }},
		{"single-label domain", func(c *Config) { c.Broker.Tenants[0].Domain = "localhost" }},
		{"idn domain", func(c *Config) { c.Broker.Tenants[0].Domain = "xn--bcher-kva.example" }},
		{"many tenants", func(c *Config) { c.Broker.Tenants = []Tenant{{"a.org"}, {"b.org"}, {"sub.a.org"}} }},
		{"http all interfaces, port 0", func(c *Config) { c.HTTP.Addr = ":0" }},
		{"http ipv6", func(c *Config) { c.HTTP.Addr = "[::1]:8080" }},
		{"cluster", func(c *Config) {
			c.NATS.URLs = []string{"nats://n1:4222", "tls://user:pw@n2", "NATS://n3:4222"}
			c.NATS.Replicas = 3
			c.NATS.CredentialsFile = creds
		}},
		{"embedded listen", func(c *Config) { c.NATS.Listen = "127.0.0.1:4222" }},
		{"embedded sync always", func(c *Config) { c.NATS.SyncInterval = "always" }},
		{"embedded sync interval bounds", func(c *Config) { c.NATS.SyncInterval = "10ms" }},
		{"embedded sync interval most", func(c *Config) { c.NATS.SyncInterval = "2m" }},
		{"nkey user over tls", func(c *Config) {
			c.NATS.URLs = []string{"tls://n1:4222"}
			c.NATS.NKeySeedFile = creds
			c.NATS.TLS = NATSTLS{CAFile: kek, CertFile: creds, KeyFile: kek}
		}},
		{"nats tls ca only", func(c *Config) {
			c.NATS.URLs = []string{"tls://n1:4222"}
			c.NATS.TLS.CAFile = kek
		}},
		{"peers", func(c *Config) {
			c.GRPC.Peers = map[string]string{}
			for i, s := range Services() {
				c.GRPC.Peers[s] = "svc-" + s + ":" + string(rune('1'+i)) + "000"
			}
		}},
		{"kek file", func(c *Config) { c.Keystore.KEKFile = kek }},
		{"kek env", func(c *Config) { c.Keystore.KEKFromEnv = true }},
		{"text debug log", func(c *Config) { c.Log = Log{Level: "debug", Format: "text"} }},
		{"events kept forever", func(c *Config) { c.Bus.EventMaxAge = 0 }},
		{"bus minimums", func(c *Config) {
			c.Bus = Bus{Duplicates: time.Second, EventMaxAge: time.Hour, WorkMaxAge: time.Second,
				MaxDeliver: 1, AckWait: time.Second}
		}},
		{"bus maximums", func(c *Config) { c.Bus.MaxDeliver = 100 }},
		{"https public url with a DNS name federates", func(c *Config) { c.HTTP.PublicURL = "https://broker.example.org" }},
		{"http tls without public url", func(c *Config) {
			c.HTTP.TLS = HTTPTLS{CertFile: kek, KeyFile: kek}
			c.Federation.BrokerName = "broker.example.org"
		}},
		{"federation on one machine over https", func(c *Config) {
			c.HTTP.PublicURL = "https://broker.a.example:8443"
			c.HTTP.TLS = HTTPTLS{CertFile: kek, KeyFile: kek}
			c.Federation = Federation{CAFile: kek, AllowPrivateTargets: true,
				Resolve: map[string]string{"b.example": "127.0.0.3:8443", "broker.b.example": "[::1]:8443"},
				Skew:    time.Second, OutboxMaxAge: time.Minute, RetryMin: 10 * time.Millisecond, RetryMax: time.Minute,
				StrangerRate: "1000000/h", KeyCacheMaxAge: 168 * time.Hour, Senders: 1, PerRemote: 1}
		}},
		{"federation over plain http on loopback", func(c *Config) {
			c.HTTP.PublicURL = "http://127.0.0.2:8080"
			c.Federation.AllowPlainHTTPLoopback = true
			c.Federation.BrokerName = "broker.a.example"
			c.Federation.Resolve = map[string]string{"b.example": "127.0.0.3:8080"}
		}},
		{"stranger rate per second", func(c *Config) { c.Federation.StrangerRate = "1/s" }},
		{"idp extra scopes", func(c *Config) {
			c.Identity.IdPs = []IdP{{Tenant: "example.org", Issuer: "https://idp.example", ClientID: "x", Scopes: []string{"groups", "urn:example:scope/read"}}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.mutate(&c)
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPrecedence checks defaults < file < env < flags, key by key.
func TestPrecedence(t *testing.T) {
	file := writeFile(t, "alpd.yaml", `
broker:
  name: fromfile
  tenants:
    - domain: file.org
    - domain: file2.org
data_dir: /srv/file
http:
  addr: 127.0.0.1:1001
nats:
  urls: [nats://file:4222]
  replicas: 3
grpc:
  listen: 127.0.0.1:2001
log:
  level: warn
`)
	env := envMap{
		EnvConfig:     file,
		EnvBrokerName: "fromenv",
		EnvTenants:    "env.org, env2.org",
		EnvDataDir:    "/srv/env",
		EnvHTTPAddr:   "127.0.0.1:1002",
		EnvNATSURL:    "nats://env1:4222,nats://env2:4222",
		EnvGRPCAddr:   "127.0.0.1:2002",
		EnvLogLevel:   "error",
	}
	flags := []string{
		"--data-dir", "/srv/flag",
		"--http-addr", "127.0.0.1:1003",
		"--nats-url", "nats://flag1:4222",
		"--nats-url=tls://flag2:4222",
		"--grpc-addr", "127.0.0.1:2003",
		"--log-level", "debug",
	}
	type view struct {
		Name, DataDir, HTTP, GRPC, Level, Format string
		Tenants, URLs                            []string
		Replicas                                 int
	}
	see := func(c Config) view {
		v := view{Name: c.Broker.Name, DataDir: c.DataDir, HTTP: c.HTTP.Addr, GRPC: c.GRPC.Listen,
			Level: c.Log.Level, Format: c.Log.Format, URLs: c.NATS.URLs, Replicas: c.NATS.Replicas}
		for _, t := range c.Broker.Tenants {
			v.Tenants = append(v.Tenants, t.Domain)
		}
		return v
	}
	tests := []struct {
		name string
		args []string
		env  envMap
		want view
	}{
		{"file over defaults", nil, envMap{EnvConfig: file}, view{
			Name: "fromfile", Tenants: []string{"file.org", "file2.org"}, DataDir: "/srv/file",
			HTTP: "127.0.0.1:1001", URLs: []string{"nats://file:4222"}, GRPC: "127.0.0.1:2001",
			Level: "warn", Format: "json", Replicas: 3,
		}},
		{"env over file", nil, env, view{
			Name: "fromenv", Tenants: []string{"env.org", "env2.org"}, DataDir: "/srv/env",
			HTTP: "127.0.0.1:1002", URLs: []string{"nats://env1:4222", "nats://env2:4222"}, GRPC: "127.0.0.1:2002",
			Level: "error", Format: "json", Replicas: 3,
		}},
		{"flags over env", flags, env, view{
			Name: "fromenv", Tenants: []string{"env.org", "env2.org"}, DataDir: "/srv/flag",
			HTTP: "127.0.0.1:1003", URLs: []string{"nats://flag1:4222", "tls://flag2:4222"}, GRPC: "127.0.0.1:2003",
			Level: "debug", Format: "json", Replicas: 3,
		}},
		{"flags over file, no env", append([]string{"--config", file}, flags...), nil, view{
			Name: "fromfile", Tenants: []string{"file.org", "file2.org"}, DataDir: "/srv/flag",
			HTTP: "127.0.0.1:1003", URLs: []string{"nats://flag1:4222", "tls://flag2:4222"}, GRPC: "127.0.0.1:2003",
			Level: "debug", Format: "json", Replicas: 3,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, rest, err := Load(tt.args, tt.env.get)
			if err != nil {
				t.Fatal(err)
			}
			if len(rest) != 0 {
				t.Errorf("rest = %q", rest)
			}
			if got := see(c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestConfigFileChoice(t *testing.T) {
	a := writeFile(t, "a.yaml", "broker: {name: a, tenants: [{domain: a.org}]}\n")
	b := writeFile(t, "b.yaml", "broker: {name: b, tenants: [{domain: b.org}]}\n")
	tests := []struct {
		name string
		args []string
		env  envMap
		want string
	}{
		{"env", nil, envMap{EnvConfig: a}, "a"},
		{"flag", []string{"--config", b}, nil, "b"},
		{"flag over env", []string{"--config", b}, envMap{EnvConfig: a}, "b"},
		{"empty flag disables env", []string{"--config="}, envMap{EnvConfig: a, EnvTenants: "x.org"}, "alpd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, err := Load(tt.args, tt.env.get)
			if err != nil {
				t.Fatal(err)
			}
			if c.Broker.Name != tt.want {
				t.Errorf("broker.name = %q, want %q", c.Broker.Name, tt.want)
			}
		})
	}
}

func TestLoadDetails(t *testing.T) {
	base := envMap{EnvTenants: "example.org"}
	with := func(kv ...string) envMap {
		m := envMap{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}

	t.Run("data dir made absolute", func(t *testing.T) {
		c, _, err := Load(nil, base.get)
		if err != nil {
			t.Fatal(err)
		}
		wd, _ := os.Getwd()
		if want := filepath.Join(wd, "data"); c.DataDir != want {
			t.Errorf("data_dir = %q, want %q", c.DataDir, want)
		}
		if want := filepath.Join(wd, "data", "keystore.sealed"); c.KeystorePath() != want {
			t.Errorf("KeystorePath() = %q, want %q", c.KeystorePath(), want)
		}
	})
	t.Run("nats-url comma-separated and repeated", func(t *testing.T) {
		c, _, err := Load([]string{"--nats-url", "nats://a:1, nats://b:2", "--nats-url", "nats://c:3"}, base.get)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"nats://a:1", "nats://b:2", "nats://c:3"}; !slices.Equal(c.NATS.URLs, want) {
			t.Errorf("urls = %q, want %q", c.NATS.URLs, want)
		}
	})
	t.Run("empty nats-url flag forces embedded", func(t *testing.T) {
		c, _, err := Load([]string{"--nats-url="}, with(EnvNATSURL, "nats://a:1").get)
		if err != nil {
			t.Fatal(err)
		}
		if !c.Embedded() {
			t.Errorf("urls = %q, want none", c.NATS.URLs)
		}
	})
	t.Run("empty env var is unset", func(t *testing.T) {
		c, _, err := Load(nil, with(EnvLogLevel, "", EnvBrokerName, "").get)
		if err != nil {
			t.Fatal(err)
		}
		if c.Log.Level != "info" || c.Broker.Name != "alpd" {
			t.Errorf("level %q, name %q: want defaults", c.Log.Level, c.Broker.Name)
		}
	})
	t.Run("nil env", func(t *testing.T) {
		_, _, err := Load([]string{"--data-dir", "/x"}, nil)
		wantErr(t, err, "config: broker.tenants:")
	})
	t.Run("ALPD_KEK recorded, not kept", func(t *testing.T) {
		c, _, err := Load(nil, with(EnvKEK, "c2VjcmV0").get)
		if err != nil {
			t.Fatal(err)
		}
		if !c.Keystore.KEKFromEnv {
			t.Error("KEKFromEnv = false")
		}
		if strings.Contains(fmt.Sprintf("%#v", c), "c2VjcmV0") {
			t.Error("the KEK value is in the Config")
		}
	})
	t.Run("ALPD_KEK and kek_file", func(t *testing.T) {
		kek := writeFile(t, "kek", "x")
		file := writeFile(t, "alpd.yaml", "keystore:\n  kek_file: "+kek+"\n")
		_, _, err := Load([]string{"--config", file}, with(EnvKEK, "c2VjcmV0").get)
		wantErr(t, err, "config: keystore.kek_file:", "ALPD_KEK")
	})
	t.Run("error names the env var that set the value", func(t *testing.T) {
		_, _, err := Load(nil, with(EnvHTTPAddr, "nope").get)
		wantErr(t, err, `config: http.addr: "nope" is not host:port (set by ALPD_HTTP_ADDR)`)
	})
	t.Run("error names the flag that set the value", func(t *testing.T) {
		_, _, err := Load([]string{"--nats-url", "nats://a:1,ftp://x"}, base.get)
		wantErr(t, err, `config: nats.urls[1]: "ftp://x" is not a nats:// or tls:// URL (set by --nats-url)`)
	})
	t.Run("error names the env var for a tenant", func(t *testing.T) {
		_, _, err := Load(nil, envMap{EnvTenants: "ok.org,Bad.org"}.get)
		wantErr(t, err, `config: broker.tenants[1].domain: "Bad.org" must be lowercase (set by ALPD_TENANTS)`)
	})
	t.Run("nats nkey and tls from env over file", func(t *testing.T) {
		seed, ca, cert, key := writeFile(t, "policy.nk", "SU"), writeFile(t, "ca.pem", "x"), writeFile(t, "c.pem", "x"), writeFile(t, "k.pem", "x")
		file := writeFile(t, "alpd.yaml", "nats:\n  urls: [tls://n1:4222]\n  nkey_seed_file: /nowhere\n  tls: {ca_file: /nowhere}\n")
		c, _, err := Load([]string{"--config", file}, with(EnvNATSNKeySeedFile, seed, EnvNATSTLSCAFile, ca,
			EnvNATSTLSCertFile, cert, EnvNATSTLSKeyFile, key).get)
		if err != nil {
			t.Fatal(err)
		}
		if c.NATS.NKeySeedFile != seed || c.NATS.TLS != (NATSTLS{CAFile: ca, CertFile: cert, KeyFile: key}) {
			t.Errorf("nats = %+v", c.NATS)
		}
	})
	t.Run("error names the env var of a nats file", func(t *testing.T) {
		_, _, err := Load([]string{"--nats-url", "tls://n1:4222"}, with(EnvNATSTLSCAFile, "/nowhere/ca.pem").get)
		wantErr(t, err, `config: nats.tls.ca_file: "/nowhere/ca.pem" does not exist (set by ALPD_NATS_TLS_CA_FILE)`)
	})
	t.Run("missing config file", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "nope.yaml")
		_, _, err := Load(nil, with(EnvConfig, missing).get)
		wantErr(t, err, "nope.yaml", "ALPD_CONFIG")
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("error %v does not wrap os.ErrNotExist", err)
		}
	})
}

func TestArgs(t *testing.T) {
	env := envMap{EnvTenants: "example.org"}.get
	tests := []struct {
		name      string
		args      []string
		wantRest  []string
		wantLevel string
	}{
		{"none", nil, nil, "info"},
		{"service only", []string{"policy"}, []string{"policy"}, "info"},
		{"flag then service", []string{"--log-level", "debug", "policy"}, []string{"policy"}, "debug"},
		{"service then flag", []string{"policy", "-log-level=warn"}, []string{"policy"}, "warn"},
		{"several positionals", []string{"a", "--log-level", "error", "b"}, []string{"a", "b"}, "error"},
		{"double dash ends flags", []string{"policy", "--", "--log-level", "debug"}, []string{"policy", "--log-level", "debug"}, "info"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, rest, err := Load(tt.args, env)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rest, tt.wantRest) {
				t.Errorf("rest = %q, want %q", rest, tt.wantRest)
			}
			if c.Log.Level != tt.wantLevel {
				t.Errorf("log.level = %q, want %q", c.Log.Level, tt.wantLevel)
			}
		})
	}
}

func TestFlagErrors(t *testing.T) {
	env := envMap{EnvTenants: "example.org"}.get
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"--verbose"}, "config: flag provided but not defined: -verbose"},
		{"unknown flag after service", []string{"policy", "--verbose"}, "not defined: -verbose"},
		{"missing value", []string{"--http-addr"}, "flag needs an argument: -http-addr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Load(tt.args, env)
			wantErr(t, err, tt.want)
			if errors.Is(err, flag.ErrHelp) {
				t.Error("a usage error is not a help request")
			}
		})
	}
	for _, h := range []string{"-h", "--help", "-help"} {
		_, _, err := Load([]string{h}, env)
		if !errors.Is(err, flag.ErrHelp) {
			t.Errorf("Load(%q) = %v, want flag.ErrHelp", h, err)
		}
	}
}

// TestFileErrors checks file problems name the file, the line and the key.
func TestFileErrors(t *testing.T) {
	tests := []struct {
		name string
		data string
		want []string
	}{
		{"unknown top-level key", "data_dir: /x\ntenants:\n  - domain: a.org\n",
			[]string{`config: alpd.yaml: line 2: unknown key "tenants" at the top level`}},
		{"unknown nested key", "broker:\n  name: x\n  tenantz:\n    - domain: a.org\n",
			[]string{`config: alpd.yaml: line 3: unknown key "tenantz" in broker`}},
		{"unknown key in list item", "broker:\n  tenants:\n    - domain: a.org\n    - domian: b.org\n",
			[]string{`config: alpd.yaml: line 4: unknown key "domian" in broker.tenants[1]`}},
		{"unknown key deep", "bus:\n  ack_wait: 1s\n  max_age: 1h\n",
			[]string{`line 3: unknown key "max_age" in bus`}},
		{"not yaml-exposed field", "keystore:\n  kekfromenv: true\n",
			[]string{`line 2: unknown key "kekfromenv" in keystore`}},
		{"malformed", "broker:\n  name: x\n   tenants: []\n",
			[]string{"config: alpd.yaml: line 3:"}},
		{"tab indent", "broker:\n\tname: x\n",
			[]string{"config: alpd.yaml:"}},
		{"unclosed quote", "data_dir: \"/x\n",
			[]string{"config: alpd.yaml:"}},
		{"integer expected", "nats:\n  replicas: three\n",
			[]string{`config: alpd.yaml: line 2: nats.replicas: want an integer, got "three"`}},
		{"fraction for an integer", "bus:\n  max_deliver: 2.5\n",
			[]string{`line 2: bus.max_deliver: want an integer, got "2.5"`}},
		{"duration expected", "bus:\n  work_max_age: 7d\n",
			[]string{`config: alpd.yaml: line 2: bus.work_max_age: "7d" is not a duration`}},
		{"duration given a list", "bus:\n  ack_wait: [1s]\n",
			[]string{"line 2: bus.ack_wait:"}},
		{"list expected", "nats:\n  urls: nats://a:4222\n",
			[]string{`line 2: nats.urls: want a list, got "nats://a:4222"`}},
		{"string expected", "http:\n  addr: {host: x}\n",
			[]string{"line 2: http.addr: want a single value, got a mapping"}},
		{"mapping expected", "broker: alpd\n",
			[]string{`line 1: want a mapping of keys in broker, got "alpd"`}},
		{"peers mapping expected", "grpc:\n  peers: [identity]\n",
			[]string{"line 2: grpc.peers: want a mapping"}},
		{"peer value", "grpc:\n  peers:\n    identity: [a, b]\n",
			[]string{"line 3: grpc.peers.identity: want a single value"}},
		{"top level not a mapping", "- a\n- b\n",
			[]string{"config: alpd.yaml: line 1: want a mapping of keys at the top level, got a list"}},
		{"duplicate key", "log:\n  level: info\n  level: debug\n",
			[]string{"config: alpd.yaml: line 3: log.level: key given twice (first at line 2)"}},
		{"two documents", "log: {level: info}\n---\nlog: {level: debug}\n",
			[]string{"config: alpd.yaml: line 3: a second YAML document"}},
		{"merge of itself", "bus: &m\n  <<: *m\n",
			[]string{"config: alpd.yaml: anchor 'm' value contains itself"}},
		{"all problems at once", "broker:\n  nam: x\nnats:\n  replicas: x\nfoo: 1\n",
			[]string{`line 2: unknown key "nam" in broker`, "line 4: nats.replicas:", `line 5: unknown key "foo"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.data), "alpd.yaml")
			wantErr(t, err, tt.want...)
			if got := len(errs(err)); got != len(tt.want) {
				t.Errorf("got %d errors, want %d:\n%v", got, len(tt.want), err)
			}
			// The same through Load names the file path.
			path := writeFile(t, "alpd.yaml", tt.data)
			_, _, err = Load([]string{"--config", path}, envMap{EnvTenants: "example.org"}.get)
			wantErr(t, err, "config: "+path+":")
		})
	}
}

func TestParseAccepts(t *testing.T) {
	def := Default()
	tests := []struct {
		name  string
		data  string
		check func(c Config) bool
	}{
		{"empty", "", func(c Config) bool { return reflect.DeepEqual(c, def) }},
		{"comments only", "# nothing yet\n", func(c Config) bool { return reflect.DeepEqual(c, def) }},
		{"document marker only", "---\n", func(c Config) bool { return reflect.DeepEqual(c, def) }},
		{"null section and values keep defaults", "bus:\nlog: {}\ndata_dir: ~\nnats:\n  urls:\n  replicas: ~\nkeystore: {backend: ~}\ngrpc: {peers: ~}\nbroker: {tenants: ~}\n---\n", func(c Config) bool {
			return reflect.DeepEqual(c, def)
		}},
		{"partial section keeps other defaults", "bus:\n  ack_wait: 1m\n", func(c Config) bool {
			return c.Bus.AckWait == time.Minute && c.Bus.MaxDeliver == 5 && c.Bus.Duplicates == 2*time.Minute
		}},
		{"bare zero duration", "bus:\n  event_max_age: 0\n", func(c Config) bool { return c.Bus.EventMaxAge == 0 }},
		{"quoted values", "nats:\n  replicas: 3\nhttp:\n  addr: \":8080\"\n", func(c Config) bool {
			return c.NATS.Replicas == 3 && c.HTTP.Addr == ":8080"
		}},
		{"anchors and merge keys", `
broker:
  tenants: [&t {domain: a.org}, *t]
grpc:
  peers: &p
    identity: id:1
bus: &b
  <<: {ack_wait: 5s, max_deliver: 7}
  max_deliver: 9
`, func(c Config) bool {
			return len(c.Broker.Tenants) == 2 && c.Broker.Tenants[1].Domain == "a.org" &&
				c.GRPC.Peers["identity"] == "id:1" && c.Bus.AckWait == 5*time.Second && c.Bus.MaxDeliver == 9
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.data), "alpd.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c) {
				t.Errorf("unexpected config: %+v", c)
			}
		})
	}
}

// TestRoundTrip checks that Config's yaml tags and the file decoder agree:
// every field of a marshalled Config parses back unchanged.
func TestRoundTrip(t *testing.T) {
	c := Config{
		Broker:   Broker{Name: "b1", Tenants: []Tenant{{"a.org"}, {"b.org"}}},
		DataDir:  "/var/lib/alpd",
		HTTP:     HTTP{Addr: ":8443"},
		NATS:     NATS{URLs: []string{"tls://n1:4222", "tls://n2:4222"}, Listen: "", CredentialsFile: "/etc/alpd/nats.creds", NKeySeedFile: "/etc/alpd/policy.nk", TLS: NATSTLS{CAFile: "/etc/alpd/ca.pem", CertFile: "/etc/alpd/c.pem", KeyFile: "/etc/alpd/k.pem"}, Replicas: 3},
		GRPC:     GRPC{Listen: ":9090", Peers: map[string]string{"identity": "identity:9090", "ledger": "ledger:9090"}},
		Keystore: Keystore{Backend: "file", Path: "/var/lib/alpd/ks", KEKFile: "/etc/alpd/kek"},
		Log:      Log{Level: "debug", Format: "text"},
		Bus:      Bus{Duplicates: 5 * time.Minute, EventMaxAge: 0, WorkMaxAge: 12 * time.Hour, MaxDeliver: 9, AckWait: 45 * time.Second},
	}
	data, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(data, "marshalled")
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if !reflect.DeepEqual(got, c) {
		t.Errorf("round trip:\ngot  %+v\nwant %+v\n%s", got, c, data)
	}
}

// TestParseDoesNotShareState checks Parse results are independent.
func TestParseDoesNotShareState(t *testing.T) {
	data := []byte("grpc:\n  peers: {identity: a:1}\nbroker:\n  tenants: [{domain: a.org}]\n")
	a, err := Parse(data, "a")
	if err != nil {
		t.Fatal(err)
	}
	a.GRPC.Peers["ledger"] = "x:1"
	a.Broker.Tenants[0].Domain = "changed.org"
	b, err := Parse(data, "b")
	if err != nil {
		t.Fatal(err)
	}
	if len(b.GRPC.Peers) != 1 || b.Broker.Tenants[0].Domain != "a.org" {
		t.Errorf("second Parse sees changes to the first: %+v", b)
	}
}

func TestMultipleErrors(t *testing.T) {
	file := writeFile(t, "alpd.yaml", `
broker:
  name: "bad name"
  tenants: [{domain: Bad.org}]
nats:
  replicas: 2
log:
  format: xml
bus:
  max_deliver: 0
`)
	_, _, err := Load([]string{"--config", file, "--http-addr", "nope"}, nil)
	want := []string{
		"config: broker.name:",
		"config: broker.tenants[0].domain:",
		"config: http.addr:",
		"config: nats.replicas:",
		"config: log.format:",
		"config: bus.max_deliver:",
	}
	wantErr(t, err, want...)
	if got := len(errs(err)); got != len(want) {
		t.Errorf("got %d errors, want %d:\n%v", got, len(want), err)
	}
}

func TestUsage(t *testing.T) {
	var b bytes.Buffer
	Usage(&b)
	out := b.String()
	for _, s := range []string{"--config", "--data-dir", "--http-addr", "--nats-url", "--grpc-addr", "--log-level",
		EnvConfig, EnvDataDir, EnvHTTPAddr, EnvNATSURL, EnvGRPCAddr, EnvLogLevel, EnvTenants, EnvBrokerName, EnvKEK,
		EnvNATSNKeySeedFile, EnvNATSTLSCAFile, EnvNATSTLSCertFile, EnvNATSTLSKeyFile} {
		if !strings.Contains(out, s) {
			t.Errorf("Usage does not mention %s", s)
		}
	}
}

// TestDocs checks docs/configuration.md mentions every key, env var and flag.
func TestDocs(t *testing.T) {
	data, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	var keys []string
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		for f := range t.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			p := join(path, name)
			ft := f.Type
			if ft.Kind() != reflect.Struct {
				keys = append(keys, p)
			}
			if ft.Kind() == reflect.Slice {
				ft = ft.Elem()
				p += "[]"
			}
			if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Duration]() {
				walk(ft, p)
			}
		}
	}
	walk(reflect.TypeFor[Config](), "")
	for _, k := range keys {
		if !strings.Contains(doc, "`"+k+"`") {
			t.Errorf("docs/configuration.md does not mention `%s`", k)
		}
	}
	fs := newFlagSet(&flagValues{})
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(doc, "--"+f.Name) {
			t.Errorf("docs/configuration.md does not mention --%s", f.Name)
		}
	})
	for _, e := range envVars() {
		if !strings.Contains(doc, e.name) {
			t.Errorf("docs/configuration.md does not mention %s", e.name)
		}
	}
}

func TestHTTPLimitsFromFile(t *testing.T) {
	c, err := Parse([]byte("http:\n  read_timeout: 45s\n  idle_timeout: 2m\n  max_header_bytes: 16384\n  max_conns_per_address: 0\n"), "alpd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h := c.HTTP
	if h.ReadTimeout != 45*time.Second || h.IdleTimeout != 2*time.Minute || h.MaxHeaderBytes != 16384 || h.MaxConnsPerAddress != 0 ||
		h.ReadHeaderTimeout != Default().HTTP.ReadHeaderTimeout || h.WriteTimeout != Default().HTTP.WriteTimeout {
		t.Fatalf("http section: %+v", h)
	}
	if _, err := Parse([]byte("http:\n  write_timeout: 60\n"), "alpd.yaml"); err == nil || !strings.Contains(err.Error(), "http.write_timeout") {
		t.Fatalf("a duration without unit: %v", err)
	}
}

// TestSyncEvery: nats.sync_interval as the embedded server takes it.
func TestSyncEvery(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 0, "always": 0, "1s": time.Second, "250ms": 250 * time.Millisecond} {
		if got := (NATS{SyncInterval: in}).SyncEvery(); got != want {
			t.Errorf("SyncEvery(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestFederationDerived checks the values derived from the federation and
// http sections: the broker name, whether federation is on, the public
// URL's scheme with http.tls, the stranger rate and the KEK's file.
func TestFederationDerived(t *testing.T) {
	c := valid()
	if c.FederationEnabled() {
		t.Error("FederationEnabled() with the default plain-http public URL")
	}
	c.HTTP.PublicURL = "https://Broker.A.example:8443/"
	if !c.FederationEnabled() || c.BrokerName() != "broker.a.example" {
		t.Errorf("https public URL: enabled %v, broker name %q", c.FederationEnabled(), c.BrokerName())
	}
	c.Federation.BrokerName = "alp.a.example"
	if c.BrokerName() != "alp.a.example" {
		t.Errorf("BrokerName() = %q, want federation.broker_name", c.BrokerName())
	}
	c = valid()
	c.HTTP.TLS = HTTPTLS{CertFile: "c", KeyFile: "k"}
	if got := c.PublicURL(); got != "https://127.0.0.1:8080" {
		t.Errorf("PublicURL() with http.tls = %q", got)
	}
	if n, per := Default().Federation.StrangerLimit(); n != 5 || per != time.Minute {
		t.Errorf("default stranger limit %d per %s", n, per)
	}
	c.Federation.StrangerRate = "7/h"
	if n, per := c.Federation.StrangerLimit(); n != 7 || per != time.Hour {
		t.Errorf("7/h: %d per %s", n, per)
	}
	if got, want := c.KEKPath(), filepath.Join("data", KEKFileName); got != want {
		t.Errorf("KEKPath() = %q, want %q", got, want)
	}
	c.Keystore.Path = "/srv/ks/keys.sealed"
	if got, want := c.KEKPath(), "/srv/ks/"+KEKFileName; got != want {
		t.Errorf("KEKPath() = %q, want %q", got, want)
	}
	c.Keystore.KEKFile = "/run/secrets/kek"
	if got := c.KEKPath(); got != "/run/secrets/kek" {
		t.Errorf("KEKPath() with kek_file = %q", got)
	}
}

// TestFederationFromFile reads the section and http.tls from YAML and the
// environment.
func TestFederationFromFile(t *testing.T) {
	cert, key, ca := writeFile(t, "c.pem", "x"), writeFile(t, "k.pem", "x"), writeFile(t, "ca.pem", "x")
	file := writeFile(t, "alpd.yaml", fmt.Sprintf(`
broker: {tenants: [{domain: a.example}]}
http:
  addr: 127.0.0.2:8443
  public_url: https://broker.a.example:8443
  tls: {cert_file: %s, key_file: %s}
federation:
  ca_file: %s
  resolve: {b.example: "127.0.0.3:8443", broker.b.example: "127.0.0.3:8443"}
  skew: 30s
  outbox_max_age: 0
  stranger_rate: 2/s
`, cert, key, ca))
	_, _, err := Load([]string{"--config", file}, nil)
	wantErr(t, err, "config: federation.outbox_max_age: 0s is out of range")
	c, _, err := Load([]string{"--config", file}, envMap{EnvFederationBrokerName: "alp.a.example", EnvHTTPTLSKeyFile: ca, "ALPD_DATA_DIR": t.TempDir()}.get)
	if err == nil {
		t.Fatal("outbox_max_age 0 accepted")
	}
	file2 := writeFile(t, "alpd2.yaml", strings.Replace(string(must(os.ReadFile(file))), "outbox_max_age: 0", "outbox_max_age: 1h", 1))
	c, _, err = Load([]string{"--config", file2}, envMap{EnvFederationBrokerName: "alp.a.example", EnvHTTPTLSKeyFile: ca}.get)
	if err != nil {
		t.Fatal(err)
	}
	f := c.Federation
	if c.BrokerName() != "alp.a.example" || c.HTTP.TLS != (HTTPTLS{CertFile: cert, KeyFile: ca}) || f.CAFile != ca || f.Skew != 30*time.Second ||
		f.OutboxMaxAge != time.Hour || f.RetryMax != 5*time.Minute || f.StrangerRate != "2/s" || len(f.Resolve) != 2 || f.Resolve["broker.b.example"] != "127.0.0.3:8443" {
		t.Errorf("federation from file and env: %+v, http.tls %+v, broker name %q", f, c.HTTP.TLS, c.BrokerName())
	}
	if _, err := Parse([]byte("federation:\n  resolve: [a]\n"), "alpd.yaml"); err == nil || !strings.Contains(err.Error(), "federation.resolve: want a mapping") {
		t.Errorf("resolve as a list: %v", err)
	}
	if _, err := Parse([]byte("federation:\n  brokername: x\n"), "alpd.yaml"); err == nil || !strings.Contains(err.Error(), `unknown key "brokername" in federation`) {
		t.Errorf("misspelt key: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestApprovalNotificationsFile: approvals.notifications reads webhooks,
// the optional email section and quiet hours; a wrong type in the email
// section is named by its key.
func TestApprovalNotificationsFile(t *testing.T) {
	file := writeFile(t, "alpd.yaml", `
broker:
  tenants: [{domain: example.org}]
approvals:
  notifications:
    webhooks:
      - url: https://hooks.example.org/alp
        secret_file: /run/secrets/hook
        tenant: example.org
    email:
      addr: smtp.example.org:587
      from: approvals@example.org
      to: {lee@example.org: lee.private@example.net}
    quiet_hours: {start: "22:00", end: "07:00", time_zone: Europe/Berlin}
    digest: 15m
`)
	c, err := LoadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	n := c.Approvals.Notifications
	if len(n.Webhooks) != 1 || n.Webhooks[0].Tenant != "example.org" || n.Email == nil || n.Email.Addr != "smtp.example.org:587" ||
		n.Email.To["lee@example.org"] != "lee.private@example.net" || n.QuietHours.TimeZone != "Europe/Berlin" || n.Digest != 15*time.Minute ||
		n.RetryMin != time.Second || n.MaxAge != 24*time.Hour {
		t.Fatalf("notifications %+v", n)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	bad := writeFile(t, "bad.yaml", "approvals:\n  notifications:\n    email:\n      addr: [a, b]\n")
	if _, err := LoadFile(bad); err == nil || !strings.Contains(err.Error(), "approvals.notifications.email.addr") {
		t.Fatalf("a list for email.addr: %v", err)
	}
}
