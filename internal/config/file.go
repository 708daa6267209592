package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// LoadFile reads the YAML file at path and applies it over [Default].
// It does not validate; see [Parse].
func LoadFile(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return Parse(data, path)
}

// Parse decodes one YAML document over [Default]: keys absent from the
// document, or set to null (`key: ~`), keep their default.
// source names the data in errors (normally the file name). An empty
// document is fine. Unknown keys, values of the wrong type and malformed
// YAML are errors naming source, line and key; all of them are reported.
//
// Parse does not validate the result; call [Config.Validate] once every
// layer has been applied ([Load] does).
func Parse(data []byte, source string) (Config, error) {
	c := Default()
	if err := decodeFile(&c, data, source); err != nil {
		return Config{}, err
	}
	return c, nil
}

// fileConfig mirrors Config for decoding. It differs only in the bus
// durations, which accept a bare 0 (yaml.v3 refuses an integer for a
// time.Duration). Config's yaml tags must stay identical to these; a test
// checks that a marshalled Config parses back unchanged.
type fileConfig struct {
	Broker    Broker        `yaml:"broker"`
	DataDir   string        `yaml:"data_dir"`
	HTTP      fileHTTP      `yaml:"http"`
	NATS      NATS          `yaml:"nats"`
	GRPC      GRPC          `yaml:"grpc"`
	Keystore  Keystore      `yaml:"keystore"`
	Log       Log           `yaml:"log"`
	Bus       fileBus       `yaml:"bus"`
	Ops       Ops           `yaml:"ops"`
	Identity  fileIdentity  `yaml:"identity"`
	NLIP      fileNLIP      `yaml:"nlip"`
	Policy    Policy        `yaml:"policy"`
	Ledger    fileLedger    `yaml:"ledger"`
	Approvals fileApprovals `yaml:"approvals"`
	// Federation's durations accept a bare 0 like the others'.
	Federation fileFederation `yaml:"federation"`
}

type fileFederation struct {
	BrokerName             string            `yaml:"broker_name"`
	AllowPlainHTTPLoopback bool              `yaml:"allow_plain_http_loopback"`
	AllowPrivateTargets    bool              `yaml:"allow_private_targets"`
	Resolve                map[string]string `yaml:"resolve,omitempty"`
	CAFile                 string            `yaml:"ca_file"`
	Skew                   duration          `yaml:"skew"`
	OutboxMaxAge           duration          `yaml:"outbox_max_age"`
	RetryMin               duration          `yaml:"retry_min"`
	RetryMax               duration          `yaml:"retry_max"`
	StrangerRate           string            `yaml:"stranger_rate"`
	KeyCacheMaxAge         duration          `yaml:"key_cache_max_age"`
	Senders                int               `yaml:"senders"`
	PerRemote              int               `yaml:"per_remote"`
}

func (f Federation) file() fileFederation {
	return fileFederation{BrokerName: f.BrokerName, AllowPlainHTTPLoopback: f.AllowPlainHTTPLoopback,
		AllowPrivateTargets: f.AllowPrivateTargets, Resolve: maps.Clone(f.Resolve), CAFile: f.CAFile,
		Skew: duration(f.Skew), OutboxMaxAge: duration(f.OutboxMaxAge), RetryMin: duration(f.RetryMin),
		RetryMax: duration(f.RetryMax), StrangerRate: f.StrangerRate, KeyCacheMaxAge: duration(f.KeyCacheMaxAge),
		Senders: f.Senders, PerRemote: f.PerRemote}
}

func (f fileFederation) config() Federation {
	return Federation{BrokerName: f.BrokerName, AllowPlainHTTPLoopback: f.AllowPlainHTTPLoopback,
		AllowPrivateTargets: f.AllowPrivateTargets, Resolve: f.Resolve, CAFile: f.CAFile,
		Skew: time.Duration(f.Skew), OutboxMaxAge: time.Duration(f.OutboxMaxAge), RetryMin: time.Duration(f.RetryMin),
		RetryMax: time.Duration(f.RetryMax), StrangerRate: f.StrangerRate, KeyCacheMaxAge: time.Duration(f.KeyCacheMaxAge),
		Senders: f.Senders, PerRemote: f.PerRemote}
}

type fileIdentity struct {
	IdPs        []IdP    `yaml:"idps,omitempty"`
	TestIdP     TestIdP  `yaml:"test_idp"`
	DCR         fileDCR  `yaml:"dcr"`
	FreshMaxAge duration `yaml:"fresh_max_age"`
}

type fileDCR struct {
	MaxUnusedClients          int      `yaml:"max_unused_clients"`
	MaxUnusedClientsPerTenant int      `yaml:"max_unused_clients_per_tenant"`
	UnusedClientTTL           duration `yaml:"unused_client_ttl"`
	SweepInterval             duration `yaml:"sweep_interval"`
}

func (i Identity) file() fileIdentity {
	return fileIdentity{IdPs: i.IdPs, TestIdP: i.TestIdP, DCR: fileDCR{
		MaxUnusedClients: i.DCR.MaxUnusedClients, MaxUnusedClientsPerTenant: i.DCR.MaxUnusedClientsPerTenant,
		UnusedClientTTL: duration(i.DCR.UnusedClientTTL), SweepInterval: duration(i.DCR.SweepInterval)}, FreshMaxAge: duration(i.FreshMaxAge)}
}

func (f fileIdentity) config() Identity {
	return Identity{IdPs: f.IdPs, TestIdP: f.TestIdP, DCR: DCR{
		MaxUnusedClients: f.DCR.MaxUnusedClients, MaxUnusedClientsPerTenant: f.DCR.MaxUnusedClientsPerTenant,
		UnusedClientTTL: time.Duration(f.DCR.UnusedClientTTL), SweepInterval: time.Duration(f.DCR.SweepInterval)}, FreshMaxAge: time.Duration(f.FreshMaxAge)}
}

type fileHTTP struct {
	Addr               string   `yaml:"addr"`
	PublicURL          string   `yaml:"public_url"`
	ReadHeaderTimeout  duration `yaml:"read_header_timeout"`
	ReadTimeout        duration `yaml:"read_timeout"`
	WriteTimeout       duration `yaml:"write_timeout"`
	IdleTimeout        duration `yaml:"idle_timeout"`
	MaxHeaderBytes     int      `yaml:"max_header_bytes"`
	MaxConnsPerAddress int      `yaml:"max_conns_per_address"`
	TLS                HTTPTLS  `yaml:"tls"`
}

func (h HTTP) file() fileHTTP {
	return fileHTTP{Addr: h.Addr, PublicURL: h.PublicURL, ReadHeaderTimeout: duration(h.ReadHeaderTimeout),
		ReadTimeout: duration(h.ReadTimeout), WriteTimeout: duration(h.WriteTimeout), IdleTimeout: duration(h.IdleTimeout),
		MaxHeaderBytes: h.MaxHeaderBytes, MaxConnsPerAddress: h.MaxConnsPerAddress, TLS: h.TLS}
}

func (f fileHTTP) config() HTTP {
	return HTTP{Addr: f.Addr, PublicURL: f.PublicURL, ReadHeaderTimeout: time.Duration(f.ReadHeaderTimeout),
		ReadTimeout: time.Duration(f.ReadTimeout), WriteTimeout: time.Duration(f.WriteTimeout), IdleTimeout: time.Duration(f.IdleTimeout),
		MaxHeaderBytes: f.MaxHeaderBytes, MaxConnsPerAddress: f.MaxConnsPerAddress, TLS: f.TLS}
}

type fileApprovals struct {
	Expiry struct {
		ConnectionRequest  duration `yaml:"connection_request"`
		Commitment         duration `yaml:"commitment"`
		ConfidentialFields duration `yaml:"confidential_fields"`
		StandingRule       duration `yaml:"standing_rule"`
	} `yaml:"expiry"`
	SweepEvery    duration `yaml:"sweep_every"`
	Notifications struct {
		Webhooks   []NotifyWebhook `yaml:"webhooks,omitempty"`
		Email      *NotifyEmail    `yaml:"email,omitempty"`
		QuietHours *QuietHours     `yaml:"quiet_hours,omitempty"`
		Digest     duration        `yaml:"digest"`
		RetryMin   duration        `yaml:"retry_min"`
		RetryMax   duration        `yaml:"retry_max"`
		MaxAge     duration        `yaml:"max_age"`
	} `yaml:"notifications"`
}

func (a Approvals) file() fileApprovals {
	var f fileApprovals
	f.Expiry.ConnectionRequest, f.Expiry.Commitment = duration(a.Expiry.ConnectionRequest), duration(a.Expiry.Commitment)
	f.Expiry.ConfidentialFields, f.Expiry.StandingRule = duration(a.Expiry.ConfidentialFields), duration(a.Expiry.StandingRule)
	f.SweepEvery = duration(a.SweepEvery)
	n := a.Notifications
	f.Notifications.Webhooks, f.Notifications.Email, f.Notifications.QuietHours = slices.Clone(n.Webhooks), n.Email, n.QuietHours
	f.Notifications.Digest, f.Notifications.RetryMin = duration(n.Digest), duration(n.RetryMin)
	f.Notifications.RetryMax, f.Notifications.MaxAge = duration(n.RetryMax), duration(n.MaxAge)
	return f
}

func (f fileApprovals) config() Approvals {
	n := f.Notifications
	return Approvals{SweepEvery: time.Duration(f.SweepEvery), Expiry: ApprovalExpiry{
		ConnectionRequest: time.Duration(f.Expiry.ConnectionRequest), Commitment: time.Duration(f.Expiry.Commitment),
		ConfidentialFields: time.Duration(f.Expiry.ConfidentialFields), StandingRule: time.Duration(f.Expiry.StandingRule)},
		Notifications: Notifications{Webhooks: n.Webhooks, Email: n.Email, QuietHours: n.QuietHours, Digest: time.Duration(n.Digest),
			RetryMin: time.Duration(n.RetryMin), RetryMax: time.Duration(n.RetryMax), MaxAge: time.Duration(n.MaxAge)}}
}

type fileLedger struct {
	Workers             int      `yaml:"workers"`
	MaxBatch            int      `yaml:"max_batch"`
	MaxTrees            int      `yaml:"max_trees"`
	CheckpointInterval  duration `yaml:"checkpoint_interval"`
	CheckpointEvery     int      `yaml:"checkpoint_every"`
	SecretsCacheTTL     duration `yaml:"secrets_cache_ttl"`
	MaxExports          int      `yaml:"max_exports"`
	MaxExportsPerPerson int      `yaml:"max_exports_per_person"`
	ExportWriteTimeout  duration `yaml:"export_write_timeout"`
}

func (l Ledger) file() fileLedger {
	return fileLedger{Workers: l.Workers, MaxBatch: l.MaxBatch, MaxTrees: l.MaxTrees,
		CheckpointInterval: duration(l.CheckpointInterval), CheckpointEvery: l.CheckpointEvery,
		SecretsCacheTTL: duration(l.SecretsCacheTTL),
		MaxExports:      l.MaxExports, MaxExportsPerPerson: l.MaxExportsPerPerson, ExportWriteTimeout: duration(l.ExportWriteTimeout)}
}

func (f fileLedger) config() Ledger {
	return Ledger{Workers: f.Workers, MaxBatch: f.MaxBatch, MaxTrees: f.MaxTrees,
		CheckpointInterval: time.Duration(f.CheckpointInterval), CheckpointEvery: f.CheckpointEvery,
		SecretsCacheTTL: time.Duration(f.SecretsCacheTTL),
		MaxExports:      f.MaxExports, MaxExportsPerPerson: f.MaxExportsPerPerson, ExportWriteTimeout: time.Duration(f.ExportWriteTimeout)}
}

type fileNLIP struct {
	MaxMessageBytes int      `yaml:"max_message_bytes"`
	MaxSubmessages  int      `yaml:"max_submessages"`
	MaxDepth        int      `yaml:"max_depth"`
	DecisionWait    duration `yaml:"decision_wait"`
	AllowedOrigins  []string `yaml:"allowed_origins,omitempty"`
	AgentPerMinute  int      `yaml:"agent_per_minute"`
	AgentBurst      int      `yaml:"agent_burst"`
	PersonPerMinute int      `yaml:"person_per_minute"`
	PersonBurst     int      `yaml:"person_burst"`
	TenantPerMinute int      `yaml:"tenant_per_minute"`
	TenantBurst     int      `yaml:"tenant_burst"`
	WSPerMinute     int      `yaml:"ws_per_minute"`
	WSBurst         int      `yaml:"ws_burst"`
	WSIdleTimeout   duration `yaml:"ws_idle_timeout"`
	// Bounds of the WebSockets together.
	WSReadTimeout     duration `yaml:"ws_read_timeout"`
	WSMaxPerAgent     int      `yaml:"ws_max_per_agent"`
	WSMaxPerPerson    int      `yaml:"ws_max_per_person"`
	WSReadBufferBytes int      `yaml:"ws_read_buffer_bytes"`
	NMPHaltPercent    int      `yaml:"nmp_halt_percent"`
}

func (n NLIP) file() fileNLIP {
	return fileNLIP{
		MaxMessageBytes: n.MaxMessageBytes, MaxSubmessages: n.MaxSubmessages, MaxDepth: n.MaxDepth,
		DecisionWait: duration(n.DecisionWait), AllowedOrigins: slices.Clone(n.AllowedOrigins),
		AgentPerMinute: n.AgentPerMinute, AgentBurst: n.AgentBurst,
		PersonPerMinute: n.PersonPerMinute, PersonBurst: n.PersonBurst,
		TenantPerMinute: n.TenantPerMinute, TenantBurst: n.TenantBurst,
		WSPerMinute: n.WSPerMinute, WSBurst: n.WSBurst, WSIdleTimeout: duration(n.WSIdleTimeout),
		WSReadTimeout: duration(n.WSReadTimeout), WSMaxPerAgent: n.WSMaxPerAgent, WSMaxPerPerson: n.WSMaxPerPerson,
		WSReadBufferBytes: n.WSReadBufferBytes,
		NMPHaltPercent:    n.NMPHaltPercent,
	}
}

func (f fileNLIP) config() NLIP {
	return NLIP{
		MaxMessageBytes: f.MaxMessageBytes, MaxSubmessages: f.MaxSubmessages, MaxDepth: f.MaxDepth,
		DecisionWait: time.Duration(f.DecisionWait), AllowedOrigins: f.AllowedOrigins,
		AgentPerMinute: f.AgentPerMinute, AgentBurst: f.AgentBurst,
		PersonPerMinute: f.PersonPerMinute, PersonBurst: f.PersonBurst,
		TenantPerMinute: f.TenantPerMinute, TenantBurst: f.TenantBurst,
		WSPerMinute: f.WSPerMinute, WSBurst: f.WSBurst, WSIdleTimeout: time.Duration(f.WSIdleTimeout),
		WSReadTimeout: time.Duration(f.WSReadTimeout), WSMaxPerAgent: f.WSMaxPerAgent, WSMaxPerPerson: f.WSMaxPerPerson,
		WSReadBufferBytes: f.WSReadBufferBytes,
		NMPHaltPercent:    f.NMPHaltPercent,
	}
}

type fileBus struct {
	Duplicates  duration `yaml:"duplicates"`
	EventMaxAge duration `yaml:"event_max_age"`
	WorkMaxAge  duration `yaml:"work_max_age"`
	InboxMaxAge duration `yaml:"inbox_max_age"`
	MaxDeliver  int      `yaml:"max_deliver"`
	AckWait     duration `yaml:"ack_wait"`
}

// duration is a time.Duration written as a Go duration string ("24h").
type duration time.Duration

func (d *duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := parseDuration(n)
	if err != nil {
		return fmt.Errorf("line %d: %v", n.Line, err)
	}
	*d = duration(v)
	return nil
}

func parseDuration(n *yaml.Node) (time.Duration, error) {
	if n.Kind != yaml.ScalarNode {
		return 0, fmt.Errorf("want a duration such as \"24h\", got %s", describe(n))
	}
	d, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (use the units h, m, s, ms, e.g. \"168h\" for 7 days)", n.Value)
	}
	return d, nil
}

var durationType = reflect.TypeFor[duration]()

func toFile(c Config) fileConfig {
	f := fileConfig{
		Broker: c.Broker, DataDir: c.DataDir, HTTP: c.HTTP.file(), NATS: c.NATS,
		GRPC: c.GRPC, Keystore: c.Keystore, Log: c.Log, Ops: c.Ops, Identity: c.Identity.file(),
		NLIP: c.NLIP.file(), Policy: c.Policy, Ledger: c.Ledger.file(), Federation: c.Federation.file(), Approvals: c.Approvals.file(),
		Bus: fileBus{
			Duplicates:  duration(c.Bus.Duplicates),
			EventMaxAge: duration(c.Bus.EventMaxAge),
			WorkMaxAge:  duration(c.Bus.WorkMaxAge),
			InboxMaxAge: duration(c.Bus.InboxMaxAge),
			MaxDeliver:  c.Bus.MaxDeliver,
			AckWait:     duration(c.Bus.AckWait),
		},
	}
	// The decoder merges into maps and slices it is given; never let it
	// write into the caller's.
	f.Broker.Tenants = slices.Clone(f.Broker.Tenants)
	f.NATS.URLs = slices.Clone(f.NATS.URLs)
	f.GRPC.Peers = maps.Clone(f.GRPC.Peers)
	f.Ops.Operators = slices.Clone(f.Ops.Operators)
	f.Identity.IdPs = slices.Clone(f.Identity.IdPs)
	f.Identity.TestIdP.Users = slices.Clone(f.Identity.TestIdP.Users)
	return f
}

func (f fileConfig) config() Config {
	return Config{
		Broker: f.Broker, DataDir: f.DataDir, HTTP: f.HTTP.config(), NATS: f.NATS,
		GRPC: f.GRPC, Keystore: f.Keystore, Log: f.Log, Ops: f.Ops, Identity: f.Identity.config(),
		NLIP: f.NLIP.config(), Policy: f.Policy, Ledger: f.Ledger.config(), Federation: f.Federation.config(), Approvals: f.Approvals.config(),
		Bus: Bus{
			Duplicates:  time.Duration(f.Bus.Duplicates),
			EventMaxAge: time.Duration(f.Bus.EventMaxAge),
			WorkMaxAge:  time.Duration(f.Bus.WorkMaxAge),
			InboxMaxAge: time.Duration(f.Bus.InboxMaxAge),
			MaxDeliver:  f.Bus.MaxDeliver,
			AckWait:     time.Duration(f.Bus.AckWait),
		},
	}
}

// decodeFile applies the YAML document in data over *c.
//
// It reads the document twice. First as a node tree, walked against the
// schema to report every unknown key and ill-typed value with its line and
// full key path (yaml.v3's own messages name a Go type, not the key, and
// stop at the first syntax error anyway). Then, once the tree is known to
// be clean, into the struct with a KnownFields decoder, which does the
// actual assignment and is a backstop should the walk ever miss a case.
func decodeFile(c *Config, data []byte, source string) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // empty file, or only comments
		}
		return yamlError(source, err)
	}
	for {
		// Only one document; an empty one after it (a trailing "---") is fine.
		var next yaml.Node
		err := dec.Decode(&next)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return yamlError(source, err)
		}
		if len(next.Content) > 0 && !isNull(next.Content[0]) {
			return fmt.Errorf("config: %s: line %d: a second YAML document; the file must hold exactly one", source, docLine(&next))
		}
	}
	if len(doc.Content) == 0 || isNull(doc.Content[0]) {
		return nil // "---" or "~" alone
	}

	w := walker{source: source}
	w.value(doc.Content[0], reflect.TypeFor[fileConfig](), "")
	if err := w.err(); err != nil {
		return err
	}

	f := toFile(*c)
	dec = yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return yamlError(source, err)
	}
	*c = f.config()
	return nil
}

func docLine(n *yaml.Node) int {
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		return n.Content[0].Line
	}
	return n.Line
}

// yamlError turns a yaml.v3 error into one naming the source.
func yamlError(source string, err error) error {
	if te, ok := errors.AsType[*yaml.TypeError](err); ok {
		errs := make([]error, len(te.Errors))
		for i, e := range te.Errors {
			errs[i] = fmt.Errorf("config: %s: %s", source, e)
		}
		return errors.Join(errs...)
	}
	return fmt.Errorf("config: %s: %s", source, strings.TrimPrefix(err.Error(), "yaml: "))
}

// walker checks a YAML node tree against the struct it will be decoded
// into, collecting one error per problem.
type walker struct {
	source string
	errs   []lineError
}

type lineError struct {
	line int
	err  error
}

func (w *walker) errorf(n *yaml.Node, format string, args ...any) {
	err := fmt.Errorf("config: %s: line %d: %s", w.source, n.Line, fmt.Sprintf(format, args...))
	w.errs = append(w.errs, lineError{n.Line, err})
}

// err returns the errors found, in file order.
func (w *walker) err() error {
	slices.SortStableFunc(w.errs, func(a, b lineError) int { return a.line - b.line })
	errs := make([]error, len(w.errs))
	for i, e := range w.errs {
		errs[i] = e.err
	}
	return errors.Join(errs...)
}

// value checks node n, which will be decoded into a value of type t at
// key path path ("" for the top level).
func (w *walker) value(n *yaml.Node, t reflect.Type, path string) {
	n = deref(n)
	if isNull(n) {
		return // leaves the value as it was (all defaults of lists and maps are nil)
	}
	switch {
	case t == durationType:
		if _, err := parseDuration(n); err != nil {
			w.errorf(n, "%s: %v", path, err)
		}
	case t.Kind() == reflect.Struct:
		w.structure(n, t, path)
	case t.Kind() == reflect.Pointer:
		// An optional section (approvals.notifications.email): checked as
		// what it points to.
		w.value(n, t.Elem(), path)
	case t.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			w.errorf(n, "%s: want a mapping of name: value, got %s", path, describe(n))
			return
		}
		w.duplicates(n, path)
		for _, kv := range pairs(n) {
			k := kv[0]
			if k.Kind != yaml.ScalarNode {
				w.errorf(k, "%s: keys must be plain names, got %s", path, describe(k))
				continue
			}
			w.value(kv[1], t.Elem(), path+"."+k.Value)
		}
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			w.errorf(n, "%s: want a list, got %s", path, describe(n))
			return
		}
		for i, e := range n.Content {
			w.value(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	case t.Kind() == reflect.String:
		if n.Kind != yaml.ScalarNode {
			w.errorf(n, "%s: want a single value, got %s", path, describe(n))
		}
	case t.Kind() == reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
			w.errorf(n, "%s: want true or false, got %s", path, describe(n))
		}
	case t.Kind() == reflect.Int:
		var i int
		// yaml.v3 would truncate 2.5 to 2; only accept integers.
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&i) != nil {
			w.errorf(n, "%s: want an integer, got %s", path, describe(n))
		}
	default:
		// Only reachable if a field of a new type is added to fileConfig.
		w.errorf(n, "%s: internal error: no check for %s", path, t)
	}
}

func (w *walker) structure(n *yaml.Node, t reflect.Type, path string) {
	where := "at the top level"
	if path != "" {
		where = "in " + path
	}
	if n.Kind != yaml.MappingNode {
		w.errorf(n, "want a mapping of keys %s, got %s", where, describe(n))
		return
	}
	fields := map[string]reflect.Type{}
	var names []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		fields[name] = f.Type
		names = append(names, name)
	}
	w.duplicates(n, path)
	for _, kv := range pairs(n) {
		k := kv[0]
		if k.Kind != yaml.ScalarNode {
			w.errorf(k, "keys %s must be plain names, got %s", where, describe(k))
			continue
		}
		ft, ok := fields[k.Value]
		if !ok {
			w.errorf(k, "unknown key %q %s (known: %s)", k.Value, where, strings.Join(names, ", "))
			continue
		}
		w.value(kv[1], ft, join(path, k.Value))
	}
}

// duplicates reports keys given twice in one mapping (keys brought in by
// a merge key "<<" may be overridden, as YAML intends).
func (w *walker) duplicates(n *yaml.Node, path string) {
	first := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind != yaml.ScalarNode || isMerge(k) {
			continue
		}
		if line, ok := first[k.Value]; ok {
			w.errorf(k, "%s: key given twice (first at line %d)", join(path, k.Value), line)
			continue
		}
		first[k.Value] = k.Line
	}
}

// pairs lists the key/value pairs of a mapping, expanding merge keys.
func pairs(n *yaml.Node) [][2]*yaml.Node {
	return mergedPairs(n, map[*yaml.Node]bool{})
}

// mergedPairs is pairs, expanding each mapping once: an anchored mapping
// can merge itself ("a: &m {<<: *m}", which yaml.v3 reports when
// decoding), and merging the same mapping again adds no new keys, so
// skipping it also keeps chains of merges from growing exponentially.
func mergedPairs(n *yaml.Node, seen map[*yaml.Node]bool) [][2]*yaml.Node {
	if seen[n] {
		return nil
	}
	seen[n] = true
	var out [][2]*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		if !isMerge(k) {
			out = append(out, [2]*yaml.Node{k, v})
			continue
		}
		merged := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			merged = v.Content
		}
		for _, m := range merged {
			if m = deref(m); m.Kind == yaml.MappingNode {
				out = append(out, mergedPairs(m, seen)...)
			}
			// Anything else is rejected by the decoder itself.
		}
	}
	return out
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func isMerge(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!merge"
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}
