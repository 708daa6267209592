package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Load builds the configuration of one alpd process from its command-line
// arguments (without the program name) and environment, and validates it.
//
// Layers, each overriding the one before: [Default]; the YAML file named
// by --config, else by ALPD_CONFIG (none if neither); the ALPD_*
// environment variables; the flags. An environment variable that is empty
// counts as unset. data_dir is then made absolute (relative to the working
// directory).
//
// env looks up an environment variable (os.Getenv in main; a map in
// tests); nil means an empty environment. Load never reads the process
// environment itself.
//
// Flags and positional arguments may be mixed ("alpd policy --log-level
// debug"); "--" ends the flags. The positional arguments (the service
// name, if any) are returned in order.
//
// For -h or --help the error wraps [flag.ErrHelp]: print [Usage] and exit
// 0. Any other error (bad flag, unreadable or malformed file, invalid
// values) says what is wrong and where; validation errors are all
// reported at once.
func Load(args []string, env func(string) string) (Config, []string, error) {
	if env == nil {
		env = func(string) string { return "" }
	}
	var fv flagValues
	fs := newFlagSet(&fv)
	rest, err := parseArgs(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Config{}, nil, fmt.Errorf("config: %w", err)
		}
		return Config{}, nil, fmt.Errorf("config: %w (run alpd -h for the list of flags)", err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	c := Default()
	path, from := env(EnvConfig), EnvConfig
	if set["config"] {
		path, from = fv.config, "--config" // --config= disables ALPD_CONFIG
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return Config{}, nil, fmt.Errorf("config: %w (file named by %s)", err, from)
		}
		if c, err = Parse(data, path); err != nil {
			return Config{}, nil, err
		}
	}

	// origins remembers which env var or flag set a key, so a validation
	// error can say where to look.
	origins := map[string]string{}
	applyEnv(&c, env, origins)
	applyFlags(&c, &fv, set, origins)

	if c.DataDir != "" {
		abs, err := filepath.Abs(c.DataDir)
		if err != nil {
			return Config{}, nil, fmt.Errorf("config: data_dir: %w", err)
		}
		c.DataDir = abs
	}
	if err := joinErrors(c.validate(), origins); err != nil {
		return Config{}, nil, err
	}
	return c, rest, nil
}

// envVars lists the environment variables with the key each one sets, in
// the order Usage prints them.
func envVars() []envVar {
	return []envVar{
		{EnvConfig, "", "config file to read, like --config"},
		{EnvDataDir, "data_dir", "like --data-dir"},
		{EnvHTTPAddr, "http.addr", "like --http-addr"},
		{EnvNATSURL, "nats.urls", "like --nats-url (comma-separated)"},
		{EnvGRPCAddr, "grpc.listen", "like --grpc-addr"},
		{EnvLogLevel, "log.level", "like --log-level"},
		{EnvTenants, "broker.tenants", "tenant domains, comma-separated; replaces the list from the file"},
		{EnvBrokerName, "broker.name", "broker name (namespace of its streams on NATS)"},
		{EnvNATSNKeySeedFile, "nats.nkey_seed_file", "nkey seed file of this process's NATS user"},
		{EnvNATSTLSCAFile, "nats.tls.ca_file", "CA bundle verifying the NATS servers"},
		{EnvNATSTLSCertFile, "nats.tls.cert_file", "client certificate for NATS"},
		{EnvNATSTLSKeyFile, "nats.tls.key_file", "client certificate key for NATS"},
		{EnvHTTPTLSCertFile, "http.tls.cert_file", "certificate (chain) of the public HTTPS listener"},
		{EnvHTTPTLSKeyFile, "http.tls.key_file", "key of the public HTTPS listener's certificate"},
		{EnvFederationBrokerName, "federation.broker_name", "this broker's DNS name in federation"},
		{EnvKEK, "", "base64 key-encryption key (32 bytes), instead of keystore.kek_file"},
	}
}

type envVar struct{ name, key, help string }

func applyEnv(c *Config, env func(string) string, origins map[string]string) {
	for _, e := range envVars() {
		v := env(e.name)
		if v == "" {
			continue
		}
		switch e.name {
		case EnvDataDir:
			c.DataDir = v
		case EnvHTTPAddr:
			c.HTTP.Addr = v
		case EnvNATSURL:
			c.NATS.URLs = splitList(v)
		case EnvGRPCAddr:
			c.GRPC.Listen = v
		case EnvLogLevel:
			c.Log.Level = v
		case EnvTenants:
			c.Broker.Tenants = nil
			for _, d := range splitList(v) {
				c.Broker.Tenants = append(c.Broker.Tenants, Tenant{Domain: d})
			}
		case EnvBrokerName:
			c.Broker.Name = v
		case EnvNATSNKeySeedFile:
			c.NATS.NKeySeedFile = v
		case EnvNATSTLSCAFile:
			c.NATS.TLS.CAFile = v
		case EnvNATSTLSCertFile:
			c.NATS.TLS.CertFile = v
		case EnvNATSTLSKeyFile:
			c.NATS.TLS.KeyFile = v
		case EnvHTTPTLSCertFile:
			c.HTTP.TLS.CertFile = v
		case EnvHTTPTLSKeyFile:
			c.HTTP.TLS.KeyFile = v
		case EnvFederationBrokerName:
			c.Federation.BrokerName = v
		case EnvKEK:
			c.Keystore.KEKFromEnv = true
			origins["keystore.kek_file"] = EnvKEK
		}
		if e.key != "" {
			origins[e.key] = e.name
		}
	}
}

// flagValues receives the flags; only those actually given are applied.
type flagValues struct {
	config, dataDir, httpAddr, grpcAddr, logLevel string
	natsURLs                                      listFlag
}

// listFlag is a comma-separated, repeatable flag: "-f a,b -f c" is a, b, c.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error {
	*l = append(*l, splitList(s)...)
	return nil
}

func newFlagSet(v *flagValues) *flag.FlagSet {
	d := Default()
	fs := flag.NewFlagSet("alpd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&v.config, "config", "", "read the YAML config `file` (default: none, or "+EnvConfig+")")
	fs.StringVar(&v.dataDir, "data-dir", "", "data `directory` (data_dir; default "+d.DataDir+")")
	fs.StringVar(&v.httpAddr, "http-addr", "", "public HTTP listener `host:port` (http.addr; default "+d.HTTP.Addr+")")
	fs.Var(&v.natsURLs, "nats-url", "NATS server `url`s, comma-separated or repeated (nats.urls; default: none, run an embedded server)")
	fs.StringVar(&v.grpcAddr, "grpc-addr", "", "gRPC listener `host:port` in split mode (grpc.listen; default "+d.GRPC.Listen+")")
	fs.StringVar(&v.logLevel, "log-level", "", "log `level`: debug, info, warn or error (log.level; default "+d.Log.Level+")")
	return fs
}

func applyFlags(c *Config, v *flagValues, set map[string]bool, origins map[string]string) {
	apply := func(name, key string, do func()) {
		if set[name] {
			do()
			origins[key] = "--" + name
		}
	}
	apply("data-dir", "data_dir", func() { c.DataDir = v.dataDir })
	apply("http-addr", "http.addr", func() { c.HTTP.Addr = v.httpAddr })
	apply("nats-url", "nats.urls", func() { c.NATS.URLs = []string(v.natsURLs) })
	apply("grpc-addr", "grpc.listen", func() { c.GRPC.Listen = v.grpcAddr })
	apply("log-level", "log.level", func() { c.Log.Level = v.logLevel })
}

// parseArgs parses flags anywhere among args, returning the positional
// arguments. The flag package stops at the first positional argument, so
// it is called again after each one.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		left := fs.Args()
		if used := len(args) - len(left); used > 0 && args[used-1] == "--" {
			return append(rest, left...), nil
		}
		if len(left) == 0 {
			return rest, nil
		}
		rest = append(rest, left[0])
		args = left[1:]
	}
}

// splitList splits a comma-separated list, trimming spaces and dropping
// empty items.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// Usage writes the flags and environment variables Load understands.
func Usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: alpd [flags] [service]\n\n")
	fmt.Fprintf(w, "Without a service, all services run in one process. Services: %s.\n\n", strings.Join(Services(), ", "))
	fmt.Fprintf(w, "Settings are read from defaults, then the config file, then the\nenvironment, then flags; later ones win.\n\nFlags:\n")
	fs := newFlagSet(&flagValues{})
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(w, "  --%s %s\n      %s\n", f.Name, name, usage)
	})
	fmt.Fprintf(w, "  -h, --help\n      print this help\n\nEnvironment (an empty variable counts as unset):\n")
	for _, e := range envVars() {
		fmt.Fprintf(w, "  %-24s %s\n", e.name, e.help)
	}
	fmt.Fprintf(w, "\nEvery config file key is described in docs/configuration.md.\n")
}
