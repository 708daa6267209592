// Package config holds the configuration of the alpd binary: what it reads,
// in which order, and which values it refuses.
//
// A broker is run by operators who are not its authors, often through a
// container image or a Kubernetes manifest where they cannot easily see the
// process start. A setting that is silently ignored (a misspelt key, a flag
// given after a typo) or silently wrong (a replica count the embedded server
// cannot honour, a dedupe window longer than the streams it guards) shows up
// much later as a broker that loses or duplicates messages. So this package
// is strict, and every complaint names the key it is about:
//
//   - Values come from four layers, each overriding the one before:
//     built-in defaults ([Default]), a YAML file, environment variables
//     (ALPD_*), command-line flags. The file is convenient for a whole
//     deployment, env vars for containers, flags for a quick local run.
//   - The YAML file is decoded with unknown keys rejected, so `tenantz:` is
//     an error with its line, not a tenant list that is quietly empty.
//   - [Config.Validate] checks every rule and reports all violations at
//     once (joined with errors.Join), each as "config: <key path>: ...", so
//     a broken deployment is fixed in one round trip, not one per error.
//
// The package has no global state and never reads the process environment
// itself: [Load] takes the arguments and an env lookup function, so tests
// and embedders (two brokers in one process) stay hermetic.
//
// Secrets are not held here: for the key-encryption key, Config records
// only where it comes from (a file path, or the presence of ALPD_KEK);
// the keystore decodes it.
package config

import (
	"net/url"
	"path/filepath"
	"strings"
	"time"
)

// Environment variable names read by [Load].
const (
	EnvConfig     = "ALPD_CONFIG"
	EnvDataDir    = "ALPD_DATA_DIR"
	EnvHTTPAddr   = "ALPD_HTTP_ADDR"
	EnvNATSURL    = "ALPD_NATS_URL"
	EnvGRPCAddr   = "ALPD_GRPC_ADDR"
	EnvLogLevel   = "ALPD_LOG_LEVEL"
	EnvTenants    = "ALPD_TENANTS"
	EnvBrokerName = "ALPD_BROKER_NAME"
	// The public listener's TLS certificate and key (http.tls).
	EnvHTTPTLSCertFile = "ALPD_HTTP_TLS_CERT_FILE"
	EnvHTTPTLSKeyFile  = "ALPD_HTTP_TLS_KEY_FILE"
	// EnvFederationBrokerName sets federation.broker_name.
	EnvFederationBrokerName = "ALPD_FEDERATION_BROKER_NAME"
	// NATS client credentials and TLS files (external NATS only).
	EnvNATSNKeySeedFile = "ALPD_NATS_NKEY_SEED_FILE"
	EnvNATSTLSCAFile    = "ALPD_NATS_TLS_CA_FILE"
	EnvNATSTLSCertFile  = "ALPD_NATS_TLS_CERT_FILE"
	EnvNATSTLSKeyFile   = "ALPD_NATS_TLS_KEY_FILE"
	// EnvKEK holds the base64 key-encryption key (32 bytes) when
	// keystore.kek_file is not used. Load only notes that it is set
	// (Keystore.KEKFromEnv); it never reads or keeps the value.
	EnvKEK = "ALPD_KEK"
)

// KeystoreFileName is the keystore file under the data directory when
// keystore.path is not set.
const KeystoreFileName = "keystore.sealed"

// KEKFileName is the development key-encryption key's file, next to the
// keystore file, used when neither keystore.kek_file nor ALPD_KEK is given
// (see [Config.KEKPath]).
const KEKFileName = "keystore.kek"

// Config is the complete configuration of one alpd process.
type Config struct {
	Broker   Broker   `yaml:"broker"`
	DataDir  string   `yaml:"data_dir"`
	HTTP     HTTP     `yaml:"http"`
	NATS     NATS     `yaml:"nats"`
	GRPC     GRPC     `yaml:"grpc"`
	Keystore Keystore `yaml:"keystore"`
	Log      Log      `yaml:"log"`
	Bus      Bus      `yaml:"bus"`
	Ops      Ops      `yaml:"ops"`
	Identity Identity `yaml:"identity"`
	NLIP     NLIP     `yaml:"nlip"`
	Policy   Policy   `yaml:"policy"`
	Ledger   Ledger   `yaml:"ledger"`
	// Federation is how this broker talks to other domains' brokers
	// (docs/federation.md).
	Federation Federation `yaml:"federation"`
	// Approvals is what waits for people's decisions (docs/approvals.md).
	Approvals Approvals `yaml:"approvals"`
}

// Approvals tunes the approvals service.
type Approvals struct {
	// Expiry is how long each kind of item waits for its person (expired
	// means denied), and how long a standing rule lasts.
	Expiry ApprovalExpiry `yaml:"expiry"`
	// SweepEvery is how often pending items are checked for expiry.
	SweepEvery time.Duration `yaml:"sweep_every"`
	// Notifications tell people an item waits (none configured: none).
	Notifications Notifications `yaml:"notifications"`
}

// Notifications is approvals.notifications: signed webhooks and email.
type Notifications struct {
	Webhooks []NotifyWebhook `yaml:"webhooks,omitempty"`
	Email    *NotifyEmail    `yaml:"email,omitempty"`
	// QuietHours delay notifications (never drop them) between Start and
	// End ("22:00", "07:00") in TimeZone (an IANA name; default UTC).
	QuietHours *QuietHours `yaml:"quiet_hours,omitempty"`
	// Digest, when set, gathers a person's items for that long into one
	// message.
	Digest time.Duration `yaml:"digest"`
	// RetryMin and RetryMax bound the backoff of a failed delivery;
	// MaxAge is when a notification is given up.
	RetryMin time.Duration `yaml:"retry_min"`
	RetryMax time.Duration `yaml:"retry_max"`
	MaxAge   time.Duration `yaml:"max_age"`
}

// NotifyWebhook is one webhook receiver: for one person (their address)
// or, with Person empty, every person of Tenant. SecretFile holds the
// HMAC key of the signatures (at least 16 bytes).
type NotifyWebhook struct {
	URL        string `yaml:"url"`
	SecretFile string `yaml:"secret_file"`
	Person     string `yaml:"person,omitempty"`
	Tenant     string `yaml:"tenant,omitempty"`
}

// NotifyEmail is the SMTP relay notifications go through.
type NotifyEmail struct {
	Addr         string `yaml:"addr"`
	From         string `yaml:"from"`
	Username     string `yaml:"username,omitempty"`
	PasswordFile string `yaml:"password_file,omitempty"`
	// StartTLS: "required" (default), "opportunistic" or "off".
	StartTLS   string `yaml:"starttls,omitempty"`
	ServerName string `yaml:"server_name,omitempty"`
	// CAFile holds PEM roots for a relay with a private CA.
	CAFile string `yaml:"ca_file,omitempty"`
	// To maps a person's address to their email (default: the address).
	To map[string]string `yaml:"to,omitempty"`
}

// QuietHours is approvals.notifications.quiet_hours.
type QuietHours struct {
	Start    string `yaml:"start"`
	End      string `yaml:"end"`
	TimeZone string `yaml:"time_zone,omitempty"`
}

// ApprovalExpiry is approvals.expiry.
type ApprovalExpiry struct {
	ConnectionRequest  time.Duration `yaml:"connection_request"`
	Commitment         time.Duration `yaml:"commitment"`
	ConfidentialFields time.Duration `yaml:"confidential_fields"`
	StandingRule       time.Duration `yaml:"standing_rule"`
}

// Policy tunes the policy workers (docs/policy.md).
type Policy struct {
	// Workers is the number of concurrent decision loops in this process,
	// all on the one consumer the policy processes share.
	Workers int `yaml:"workers"`
}

// Broker names this broker and the domains it is home for.
type Broker struct {
	// Name namespaces this broker's streams, KV buckets and durable
	// consumers on NATS, so several brokers can share one NATS cluster.
	Name    string   `yaml:"name"`
	Tenants []Tenant `yaml:"tenants"`
}

// Tenant is one domain this broker is the home broker for.
type Tenant struct {
	Domain string `yaml:"domain"`
}

// HTTP configures the public HTTP listener.
type HTTP struct {
	Addr string `yaml:"addr"`
	// PublicURL is how agents, browsers and other brokers reach this
	// listener (scheme://host[:port], no path). Empty: http://<addr>.
	PublicURL string `yaml:"public_url"`
	// ReadHeaderTimeout bounds reading a request's header; ReadTimeout
	// its header and body.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	ReadTimeout       time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds writing an answer (for streams: each write).
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// IdleTimeout closes a keep-alive connection that sends no request.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes bounds a request's header (request line included).
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxConnsPerAddress caps the connections one client address (IPv6:
	// one /64) holds open at once; 0 turns the cap off.
	MaxConnsPerAddress int `yaml:"max_conns_per_address"`
	// TLS makes the listener serve HTTPS with this certificate.
	TLS HTTPTLS `yaml:"tls"`
}

// HTTPTLS names the public listener's certificate (chain) and key, PEM.
// Both or neither; with them the listener serves HTTPS only, and rereads
// the files when they change on disk (a renewed certificate needs no
// restart).
type HTTPTLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Enabled reports whether the listener serves HTTPS.
func (t HTTPTLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

// Federation configures how this broker finds, authenticates and sends to
// other domains' brokers, and how it receives from them. Every field has a
// default that is right in production except the test switches
// (AllowPlainHTTPLoopback, AllowPrivateTargets, Resolve), which only a test
// rig or a demo on one machine sets.
type Federation struct {
	// BrokerName is this broker's DNS name, the origin it signs as and
	// the name its federation keys are kept under. Empty: the host of
	// http.public_url ([Config.BrokerName]).
	BrokerName string `yaml:"broker_name"`
	// AllowPlainHTTPLoopback lets federation run over plain http, which
	// is only allowed when http.public_url and every federation.resolve
	// target are loopback addresses: a dev flag for one machine.
	AllowPlainHTTPLoopback bool `yaml:"allow_plain_http_loopback"`
	// AllowPrivateTargets lets discovery and delivery dial private,
	// loopback and link-local addresses (the SSRF guard refuses them
	// otherwise). Tests only.
	AllowPrivateTargets bool `yaml:"allow_private_targets"`
	// Resolve maps a host name to the loopback "ip:port" to dial for it,
	// whatever port the URL names (like curl --resolve), so several
	// brokers on one machine reach each other by their real names.
	Resolve map[string]string `yaml:"resolve,omitempty"`
	// CAFile holds PEM roots trusted for peers besides the system's (a
	// test CA, or a private federation's).
	CAFile string `yaml:"ca_file"`
	// Skew is how far a request's or envelope's time may be from ours.
	Skew time.Duration `yaml:"skew"`
	// OutboxMaxAge is how long delivery to a remote is retried before the
	// sender is told it failed.
	OutboxMaxAge time.Duration `yaml:"outbox_max_age"`
	// RetryMin and RetryMax bound the exponential backoff (with jitter)
	// between delivery attempts to one remote.
	RetryMin time.Duration `yaml:"retry_min"`
	RetryMax time.Duration `yaml:"retry_max"`
	// StrangerRate limits connection requests from senders without a
	// connection, per sender and per sending broker: "N/s", "N/min" or
	// "N/h" (N at once, refilled over the period; see [Federation.StrangerLimit]).
	StrangerRate string `yaml:"stranger_rate"`
	// KeyCacheMaxAge caps how long another broker's published keys are
	// used before they are fetched again, whatever their valid_until.
	KeyCacheMaxAge time.Duration `yaml:"key_cache_max_age"`
	// Senders is how many outbox items this process sends at once;
	// PerRemote caps those going to one remote domain, so that a slow or
	// dead remote holds at most that many senders.
	Senders   int `yaml:"senders"`
	PerRemote int `yaml:"per_remote"`
}

// StrangerLimit is federation.stranger_rate as n events per period; (0, 0)
// for a value Validate refuses.
func (f Federation) StrangerLimit() (n int, per time.Duration) {
	n, per, err := parseRate(f.StrangerRate)
	if err != nil {
		return 0, 0
	}
	return n, per
}

// Identity configures how people sign in (see docs/identity.md).
type Identity struct {
	// IdPs: one organization OpenID provider per tenant.
	IdPs []IdP `yaml:"idps,omitempty"`
	// TestIdP runs an in-process OpenID provider for tests and the demo.
	TestIdP TestIdP `yaml:"test_idp"`
	// DCR bounds dynamic client registration.
	DCR DCR `yaml:"dcr"`
	// FreshMaxAge is how recent a person's sign-in at their IdP must be
	// for what needs a fresh one (an approval's decision): older, they
	// sign in again with max_age=0.
	FreshMaxAge time.Duration `yaml:"fresh_max_age"`
}

// DCR bounds dynamically registered OAuth clients, which anyone may create
// and every replica holds in memory.
type DCR struct {
	// MaxUnusedClients bounds the clients nobody has used yet over all
	// tenants; MaxUnusedClientsPerTenant per tenant.
	MaxUnusedClients          int `yaml:"max_unused_clients"`
	MaxUnusedClientsPerTenant int `yaml:"max_unused_clients_per_tenant"`
	// UnusedClientTTL: a client not used for an authorization within it
	// expires; SweepInterval is how often expiry runs.
	UnusedClientTTL time.Duration `yaml:"unused_client_ttl"`
	SweepInterval   time.Duration `yaml:"sweep_interval"`
}

// IdP is a tenant's organization OpenID provider.
type IdP struct {
	Tenant           string `yaml:"tenant"`
	Issuer           string `yaml:"issuer"`
	ClientID         string `yaml:"client_id"`
	ClientSecretFile string `yaml:"client_secret_file"`
	// TenantID pins the IdP's tenant claim (Entra "tid").
	TenantID string `yaml:"tenant_id"`
	// AddressClaim is an immutable claim (e.g. oid, upn) giving the address.
	AddressClaim    string   `yaml:"address_claim"`
	VerifiedDomains []string `yaml:"verified_domains"`
	// EmailDomains allow the email claim (only with email_verified).
	EmailDomains []string `yaml:"email_domains"`
	// Directory maps "sub:<subject>" or "<address_claim>:<value>" to an
	// address (provisioned by the organization).
	Directory  map[string]string `yaml:"directory"`
	RolesClaim string            `yaml:"roles_claim"`
	// Scopes are asked for besides openid profile email offline_access,
	// e.g. groups for an IdP that sends the groups claim only when asked.
	Scopes []string `yaml:"scopes"`
}

// TestIdP is the in-process test OpenID provider. alpd refuses it on a
// non-loopback address unless ForceNonLoopback is set.
type TestIdP struct {
	Enabled          bool       `yaml:"enabled"`
	Listen           string     `yaml:"listen"`
	ForceNonLoopback bool       `yaml:"force_non_loopback"`
	TenantID         string     `yaml:"tenant_id"`
	Users            []TestUser `yaml:"users,omitempty"`
}

// TestUser is a person at the test IdP; their address is Username@tenant.
type TestUser struct {
	Username string   `yaml:"username"`
	Password string   `yaml:"password"`
	Roles    []string `yaml:"roles"`
}

// NATS says which NATS to use: the embedded server (no URLs) or a cluster.
type NATS struct {
	URLs []string `yaml:"urls"`
	// Listen is host:port for the embedded server to also accept network
	// connections on; empty means in-process connections only.
	Listen          string `yaml:"listen"`
	CredentialsFile string `yaml:"credentials_file"`
	// NKeySeedFile holds the nkey seed of this process's NATS user (one
	// user per service role; see docs/nats-permissions.md). External NATS
	// only; not together with CredentialsFile.
	NKeySeedFile string `yaml:"nkey_seed_file"`
	// TLS configures the client side of TLS to an external NATS.
	TLS NATSTLS `yaml:"tls"`
	// Replicas of each stream (1 for the embedded server).
	Replicas int `yaml:"replicas"`
	// SyncInterval is how the embedded server gets its writes onto disk:
	// "always" (or empty: the default) fsyncs every write before it is
	// acknowledged; a duration (e.g. "1s") writes each to the operating
	// system before acknowledging it and fsyncs them together that often
	// (docs/operations.md, "Durability of each step"). See SyncEvery.
	SyncInterval string `yaml:"sync_interval"`
}

// SyncAlways is nats.sync_interval's value for an fsync on every write.
const SyncAlways = "always"

// Bounds of a nats.sync_interval duration.
const (
	MinSyncInterval = 10 * time.Millisecond
	MaxSyncInterval = 2 * time.Minute
)

// SyncEvery is nats.sync_interval as a duration: 0 for an fsync on every
// write. A value Validate refuses is 0 too.
func (n NATS) SyncEvery() time.Duration {
	if n.SyncInterval == "" || n.SyncInterval == SyncAlways {
		return 0
	}
	d, err := time.ParseDuration(n.SyncInterval)
	if err != nil || d < MinSyncInterval || d > MaxSyncInterval {
		return 0
	}
	return d
}

// NATSTLS names the files for TLS to an external NATS. The files must
// exist; CertFile and KeyFile (a client certificate) go together.
type NATSTLS struct {
	// CAFile is the CA bundle that verifies the NATS servers'
	// certificates (default: the system roots).
	CAFile   string `yaml:"ca_file"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// GRPC configures split mode, where each service runs in its own process.
type GRPC struct {
	Listen string `yaml:"listen"`
	// Peers maps a service name (see [Services]) to the host:port of its
	// gRPC listener.
	Peers map[string]string `yaml:"peers"`
	// TLS is the mutual TLS of split mode: this process's role certificate
	// (URI SAN spiffe://alpd/role/<service>) and the CA that signs peers'.
	TLS GRPCTLS `yaml:"tls"`
	// Insecure allows split mode without mTLS, for local experiments only.
	Insecure bool `yaml:"insecure"`
}

// GRPCTLS names the certificate files of split mode's mutual TLS.
type GRPCTLS struct {
	CAFile   string `yaml:"ca_file"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// NLIP configures the agents' NLIP endpoints (docs/nlip.md).
type NLIP struct {
	// Bounds of one NLIP message (HTTP body or WebSocket frame).
	MaxMessageBytes int `yaml:"max_message_bytes"`
	MaxSubmessages  int `yaml:"max_submessages"`
	MaxDepth        int `yaml:"max_depth"`
	// DecisionWait is how long a send waits for policy before answering
	// "pending".
	DecisionWait time.Duration `yaml:"decision_wait"`
	// AllowedOrigins are browser origins (host patterns) allowed to call
	// NLIP, besides the broker's own: to open the WebSocket and, through
	// CORS, the HTTP binding.
	AllowedOrigins []string `yaml:"allowed_origins,omitempty"`
	// Rate limits per agent, person and tenant, and per WebSocket.
	AgentPerMinute  int           `yaml:"agent_per_minute"`
	AgentBurst      int           `yaml:"agent_burst"`
	PersonPerMinute int           `yaml:"person_per_minute"`
	PersonBurst     int           `yaml:"person_burst"`
	TenantPerMinute int           `yaml:"tenant_per_minute"`
	TenantBurst     int           `yaml:"tenant_burst"`
	WSPerMinute     int           `yaml:"ws_per_minute"`
	WSBurst         int           `yaml:"ws_burst"`
	WSIdleTimeout   time.Duration `yaml:"ws_idle_timeout"`
	// What the WebSockets may hold: how long one message may take to
	// arrive once begun, how many sockets one agent and one person may
	// keep open, and the bytes of messages being received, all sockets
	// together (docs/operations.md, "Limits and timeouts").
	WSReadTimeout     time.Duration `yaml:"ws_read_timeout"`
	WSMaxPerAgent     int           `yaml:"ws_max_per_agent"`
	WSMaxPerPerson    int           `yaml:"ws_max_per_person"`
	WSReadBufferBytes int           `yaml:"ws_read_buffer_bytes"`
	// NMPHaltPercent is the NMP budget threshold (percent of max_tokens)
	// at which a pipeline halts.
	NMPHaltPercent int `yaml:"nmp_halt_percent"`
}

// Ledger tunes the per-person ledgers (docs/ledger.md).
type Ledger struct {
	// Workers per partition in this process.
	Workers int `yaml:"workers"`
	// MaxBatch bounds the leaves of one atomic append.
	MaxBatch int `yaml:"max_batch"`
	// MaxTrees bounds the persons' trees held in memory.
	MaxTrees int `yaml:"max_trees"`
	// CheckpointInterval is the longest delay between an append and its
	// signed checkpoint; CheckpointEvery appends start a round early.
	CheckpointInterval time.Duration `yaml:"checkpoint_interval"`
	CheckpointEvery    int           `yaml:"checkpoint_every"`
	// SecretsCacheTTL bounds how late a replica sees another's erasure.
	SecretsCacheTTL time.Duration `yaml:"secrets_cache_ttl"`
	// MaxExports bounds the ledger exports this process streams at once,
	// MaxExportsPerPerson those of one person; ExportWriteTimeout bounds
	// each write to the client, so a reader that stops reading is cut off.
	MaxExports          int           `yaml:"max_exports"`
	MaxExportsPerPerson int           `yaml:"max_exports_per_person"`
	ExportWriteTimeout  time.Duration `yaml:"export_write_timeout"`
}

// Ops configures operator diagnostics (alpctl trace).
type Ops struct {
	Operators []Operator `yaml:"operators,omitempty"`
	// TracePerMinute and TraceBurst rate-limit traces per operator.
	TracePerMinute int `yaml:"trace_per_minute"`
	TraceBurst     int `yaml:"trace_burst"`
}

// Operator may run diagnostics; only the SHA-256 of their token is kept
// (alpctl operator-token NAME prints both).
type Operator struct {
	Name        string `yaml:"name"`
	TokenSHA256 string `yaml:"token_sha256"`
}

// Keystore says where private keys are kept.
type Keystore struct {
	Backend string `yaml:"backend"`
	// Path of the sealed keystore file; empty means
	// <data_dir>/keystore.sealed (see [Config.KeystorePath]).
	Path string `yaml:"path"`
	// KEKFile holds the base64 key-encryption key.
	KEKFile string `yaml:"kek_file"`
	// KEKFromEnv is set by Load when ALPD_KEK is non-empty. It is not a
	// file key; it lets Validate refuse two KEK sources at once.
	KEKFromEnv bool `yaml:"-"`
}

// Log configures the process logger (log/slog).
type Log struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}

// Bus tunes the JetStream streams and consumers.
type Bus struct {
	// Duplicates is the JetStream dedupe window of every stream.
	Duplicates time.Duration `yaml:"duplicates"`
	// EventMaxAge is the MaxAge of event-log streams; 0 keeps events forever.
	EventMaxAge time.Duration `yaml:"event_max_age"`
	// WorkMaxAge is the MaxAge of work-queue streams.
	WorkMaxAge time.Duration `yaml:"work_max_age"`
	// InboxMaxAge is how long a person's inbox keeps an item and its
	// agents' acknowledgements; 0 keeps them forever.
	InboxMaxAge time.Duration `yaml:"inbox_max_age"`
	// MaxDeliver is how often a message is delivered before it goes to the
	// dead-letter subject.
	MaxDeliver int           `yaml:"max_deliver"`
	AckWait    time.Duration `yaml:"ack_wait"`
}

// Default returns the built-in defaults. It has no tenants, so it is not
// valid on its own: a broker must be told which domains it serves.
func Default() Config {
	return Config{
		Broker:  Broker{Name: "alpd"},
		DataDir: "./data",
		HTTP: HTTP{Addr: "127.0.0.1:8080", ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
			WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10,
			MaxConnsPerAddress: 64},
		NATS:     NATS{Replicas: 1},
		GRPC:     GRPC{Listen: "127.0.0.1:9090"},
		Keystore: Keystore{Backend: "file"},
		Log:      Log{Level: "info", Format: "json"},
		Ops:      Ops{TracePerMinute: 60, TraceBurst: 5},
		NLIP: NLIP{
			MaxMessageBytes: 1 << 20, MaxSubmessages: 64, MaxDepth: 32,
			DecisionWait:   3 * time.Second,
			AgentPerMinute: 1200, AgentBurst: 40,
			PersonPerMinute: 3000, PersonBurst: 100,
			TenantPerMinute: 60000, TenantBurst: 2000,
			WSPerMinute: 1200, WSBurst: 40, WSIdleTimeout: 5 * time.Minute,
			WSReadTimeout: 30 * time.Second, WSMaxPerAgent: 8, WSMaxPerPerson: 32, WSReadBufferBytes: 16 << 20,
			NMPHaltPercent: 95,
		},
		Policy: Policy{Workers: 2},
		Approvals: Approvals{SweepEvery: 30 * time.Second,
			Notifications: Notifications{RetryMin: time.Second, RetryMax: 5 * time.Minute, MaxAge: 24 * time.Hour}, Expiry: ApprovalExpiry{ConnectionRequest: 7 * 24 * time.Hour,
				Commitment: 24 * time.Hour, ConfidentialFields: 24 * time.Hour, StandingRule: 90 * 24 * time.Hour}},
		Federation: Federation{Skew: 5 * time.Minute, OutboxMaxAge: 24 * time.Hour, RetryMin: time.Second,
			RetryMax: 5 * time.Minute, StrangerRate: "5/min", KeyCacheMaxAge: 48 * time.Hour, Senders: 64, PerRemote: 16},
		Ledger: Ledger{Workers: 2, MaxBatch: 500, MaxTrees: 4096, CheckpointInterval: 100 * time.Millisecond,
			CheckpointEvery: 1000, SecretsCacheTTL: 30 * time.Second,
			MaxExports: 4, MaxExportsPerPerson: 1, ExportWriteTimeout: 30 * time.Second},
		Identity: Identity{TestIdP: TestIdP{Listen: "127.0.0.1:0"}, FreshMaxAge: 5 * time.Minute,
			DCR: DCR{MaxUnusedClients: 10000, MaxUnusedClientsPerTenant: 2000, UnusedClientTTL: time.Hour, SweepInterval: time.Minute}},
		Bus: Bus{
			Duplicates:  2 * time.Minute,
			EventMaxAge: 720 * time.Hour,
			WorkMaxAge:  24 * time.Hour,
			InboxMaxAge: 720 * time.Hour,
			MaxDeliver:  5,
			AckWait:     30 * time.Second,
		},
	}
}

// Embedded reports whether alpd runs its own in-process nats-server,
// which it does when no NATS URL is configured.
func (c Config) Embedded() bool { return len(c.NATS.URLs) == 0 }

// PublicURL is http.public_url, or <scheme>://<http.addr> with https when
// http.tls is set, http otherwise.
func (c Config) PublicURL() string {
	if c.HTTP.PublicURL != "" {
		return strings.TrimRight(c.HTTP.PublicURL, "/")
	}
	if c.HTTP.TLS.Enabled() {
		return "https://" + c.HTTP.Addr
	}
	return "http://" + c.HTTP.Addr
}

// BrokerName is federation.broker_name, or the host of [Config.PublicURL]
// (which may not be a DNS name: Validate refuses that only when federation
// is on).
func (c Config) BrokerName() string {
	if c.Federation.BrokerName != "" {
		return c.Federation.BrokerName
	}
	u, err := url.Parse(c.PublicURL())
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Hostname())
}

// FederationEnabled reports whether this broker federates: when
// http.public_url is https (other brokers only talk HTTPS), or over plain
// http on loopback with federation.allow_plain_http_loopback. Otherwise the
// broker serves its own tenants only; Validate refuses federation settings
// it would then ignore.
func (c Config) FederationEnabled() bool {
	return strings.HasPrefix(c.PublicURL(), "https://") || c.Federation.AllowPlainHTTPLoopback
}

// KEKPath is the file the key-encryption key is read from when ALPD_KEK is
// not set: keystore.kek_file, or the development key KEKFileName next to
// the keystore file (which alpd creates at its first start).
func (c Config) KEKPath() string {
	if c.Keystore.KEKFile != "" {
		return c.Keystore.KEKFile
	}
	return filepath.Join(filepath.Dir(c.KeystorePath()), KEKFileName)
}

// KeystorePath is keystore.path, or <data_dir>/keystore.sealed if unset.
func (c Config) KeystorePath() string {
	if c.Keystore.Path != "" {
		return c.Keystore.Path
	}
	return filepath.Join(c.DataDir, KeystoreFileName)
}

// Services returns the names of the broker's services, in the order of
// the message flow. They are the valid keys of grpc.peers and the service
// names `alpd <service>` accepts.
func Services() []string {
	return []string{"ingress", "identity", "policy", "federation", "ledger", "approvals"}
}
