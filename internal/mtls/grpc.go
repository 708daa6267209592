package mtls

import (
	"context"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

// ServerCredentials are gRPC server credentials from [ServerTLS]: mTLS with
// the certificate and CA in files, reloaded when they change. Pair them with
// [UnaryAuthorizer] and [StreamAuthorizer]:
//
//	creds, err := mtls.ServerCredentials(files)
//	srv := grpc.NewServer(grpc.Creds(creds),
//		grpc.ChainUnaryInterceptor(mtls.UnaryAuthorizer(mtls.DefaultPolicy())),
//		grpc.ChainStreamInterceptor(mtls.StreamAuthorizer(mtls.DefaultPolicy())))
func ServerCredentials(files Files) (credentials.TransportCredentials, error) {
	cfg, err := ServerTLS(files)
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(cfg), nil
}

// ClientCredentials are gRPC client credentials presenting the certificate
// in files and verifying servers against the CA bundle in files, reloaded
// when they change. The server's certificate must name the host of the
// target dialled (DNS name or IP address), or the channel's authority when
// it is set with grpc.WithAuthority (to dial an address but verify a name).
func ClientCredentials(files Files) (credentials.TransportCredentials, error) {
	r, err := newReloader(files)
	if err != nil {
		return nil, err
	}
	return &clientCreds{r: r}, nil
}

// DialOption is grpc.WithTransportCredentials([ClientCredentials](files)).
func DialOption(files Files) (grpc.DialOption, error) {
	c, err := ClientCredentials(files)
	if err != nil {
		return nil, err
	}
	return grpc.WithTransportCredentials(c), nil
}

// DialOptionFor is [DialOption] for a connection to the service of role
// server: beyond its host name, the server's certificate must carry that
// role, so that one service's certificate cannot stand in for another's
// where they share host names.
func DialOptionFor(files Files, server alpv1.Role) (grpc.DialOption, error) {
	if RoleName(server) == "" {
		return nil, fmt.Errorf("mtls: %v is not a role a server can hold", server)
	}
	r, err := newReloader(files)
	if err != nil {
		return nil, err
	}
	return grpc.WithTransportCredentials(&clientCreds{r: r, want: server}), nil
}

// clientCreds builds a fresh [reloader.clientTLS] configuration for each
// handshake, for the host being dialled, and lets grpc's TLS credentials do
// the rest (ALPN, auth info).
type clientCreds struct {
	r          *reloader
	want       alpv1.Role
	serverName string // OverrideServerName
}

func (c *clientCreds) ClientHandshake(ctx context.Context, authority string, rawConn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	name := c.serverName
	if name == "" {
		host, _, err := net.SplitHostPort(authority)
		if err != nil {
			host = authority
		}
		name = host
	}
	return credentials.NewTLS(c.r.clientTLS(name, c.want)).ClientHandshake(ctx, name, rawConn)
}

func (c *clientCreds) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("mtls: client credentials used on a server (use ServerCredentials)")
}

func (c *clientCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func (c *clientCreds) Clone() credentials.TransportCredentials {
	cp := *c
	return &cp
}

// OverrideServerName sets the name servers' certificates are verified
// against (part of the interface; grpc deprecates it).
func (c *clientCreds) OverrideServerName(name string) error {
	c.serverName = name
	return nil
}
