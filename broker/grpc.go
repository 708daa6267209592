package broker

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/test/bufconn"

	"github.com/alpd-project/alpd/internal/service"
)

// inProcessGRPC serves the local services over an in-memory connection, so
// all-in-one mode runs the same gRPC code as split mode without a socket.
type inProcessGRPC struct {
	server *grpc.Server
	lis    *bufconn.Listener
	client *grpc.ClientConn
	health *health.Server
	// names maps each service to its gRPC API name, the name health uses.
	names map[service.Service]string
}

func newInProcessGRPC(svcs []service.Service) (*inProcessGRPC, error) {
	g := &inProcessGRPC{server: grpc.NewServer(), lis: bufconn.Listen(1 << 20), health: health.NewServer(),
		names: map[service.Service]string{}}
	for _, s := range svcs {
		s.RegisterGRPC(g.server)
		g.names[s] = grpcName(s)
	}
	healthpb.RegisterHealthServer(g.server, g.health)
	go func() { _ = g.server.Serve(g.lis) }()
	conn, err := grpc.NewClient("passthrough:///in-process",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return g.lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		g.server.Stop()
		return nil, fmt.Errorf("broker: in-process gRPC client: %w", err)
	}
	g.client = conn
	return g, nil
}

// registerHealth serves the same health statuses on an external server.
func (g *inProcessGRPC) registerHealth(r grpc.ServiceRegistrar) {
	healthpb.RegisterHealthServer(r, g.health)
}

// watchHealth keeps the gRPC health statuses in step with readiness: the
// empty service name stands for the whole process.
func (g *inProcessGRPC) watchHealth(ctx context.Context, svcs []service.Service) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		all := healthpb.HealthCheckResponse_SERVING
		for _, s := range svcs {
			st := healthpb.HealthCheckResponse_SERVING
			if s.Ready() != nil {
				st, all = healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_NOT_SERVING
			}
			g.health.SetServingStatus(g.names[s], st)
		}
		g.health.SetServingStatus("", all)
		select {
		case <-ctx.Done():
			g.health.Shutdown()
			return
		case <-t.C:
		}
	}
}

// grpcName is the fully qualified gRPC name of a service's API (e.g.
// alp.policy.v1.PolicyService), read from a throwaway registration.
func grpcName(s service.Service) string {
	info := grpc.NewServer()
	defer info.Stop()
	s.RegisterGRPC(info)
	for name := range info.GetServiceInfo() {
		return name
	}
	return ""
}

func (g *inProcessGRPC) stop() {
	_ = g.client.Close()
	g.server.GracefulStop()
}
