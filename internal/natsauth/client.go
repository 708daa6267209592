package natsauth

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/alpd-project/alpd/internal/envelope"
)

// ClientOptions are the connection options of role's process of broker
// namespace ns: the nkey from seedFile, the CA bundle tlsCA to verify the
// server with (empty: the system roots, TLS only if the URL or server asks
// for it), an optional client certificate (tlsCert and tlsKey together),
// and the role's inbox prefix, without which the server refuses the
// client's replies.
func ClientOptions(seedFile, tlsCA, tlsCert, tlsKey, ns, role string) ([]nats.Option, error) {
	if err := checkName(ns); err != nil {
		return nil, err
	}
	if _, ok := envelope.RoleByName(role); !ok {
		return nil, fmt.Errorf("natsauth: %q is not a service role", role)
	}
	if seedFile == "" {
		return nil, errors.New("natsauth: an nkey seed file is required")
	}
	if (tlsCert == "") != (tlsKey == "") {
		return nil, errors.New("natsauth: a TLS client certificate needs both the certificate and the key file")
	}
	nkey, err := nats.NkeyOptionFromSeed(seedFile)
	if err != nil {
		return nil, fmt.Errorf("natsauth: nkey seed file %s: %w", seedFile, err)
	}
	opts := []nats.Option{nkey, nats.CustomInboxPrefix(InboxPrefix(ns, role))}
	if tlsCA != "" {
		opts = append(opts, nats.RootCAs(tlsCA))
	}
	if tlsCert != "" {
		opts = append(opts, nats.ClientCert(tlsCert, tlsKey))
	}
	return opts, nil
}
