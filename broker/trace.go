package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/service"
)

// Transports a trace can use between hops.
const (
	ViaAuto = "auto" // gRPC where this process can reach the service, else the bus
	ViaGRPC = "grpc"
	ViaBus  = "bus"
)

// Hop is one line of a broker traceroute.
type Hop struct {
	Service    string `json:"service"`
	Action     string `json:"action"`
	DurationUS uint64 `json:"duration_us"`
	// Trust is the NMP trust level (0 hostile … 3 trusted) after the hop.
	Trust int    `json:"trust"`
	Lag   uint64 `json:"lag"`
	Ready bool   `json:"ready"`
	Via   string `json:"via"`
	Error string `json:"error,omitempty"`
	// RoundTripUS is the tracer's own measurement, transport included.
	RoundTripUS uint64 `json:"round_trip_us"`
}

// Trace sends a probe envelope through ingress, policy, federation, ledger,
// approvals and identity, hop by hop, over gRPC or the dedicated probe
// subjects (never a stream: the probe is not stored, federated or
// ledgered). Each service appends its trace entry with readiness and lag; a
// hop that cannot be reached gets an entry from the tracer saying why, and
// the probe goes on to the next service.
func (b *Broker) Trace(ctx context.Context, via string) ([]Hop, error) {
	switch via {
	case "", ViaAuto, ViaGRPC, ViaBus:
	default:
		return nil, fmt.Errorf("broker: trace via %q: want auto, grpc or bus", via)
	}
	select {
	case <-b.started:
	default:
		return nil, errors.New("broker: not started")
	}
	env := &alpv1.Envelope{
		Id:      "probe-" + uuid.Must(uuid.NewV7()).String(),
		Tenant:  b.cfg.Tenants[0],
		Type:    "alp.probe",
		Created: timestamppb.Now(),
	}
	var hops []Hop
	for _, role := range envelope.Roles() {
		hctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		start := time.Now()
		out, used, err := b.probeHop(hctx, role, env, via)
		cancel()
		rtt := uint64(time.Since(start).Microseconds())
		if err != nil {
			hops = append(hops, Hop{Service: envelope.ServiceName(role), Action: "unreachable", Via: used,
				Trust: nmpValue(envelope.Trust(env)), Error: err.Error(), RoundTripUS: rtt})
			continue
		}
		tr := envelope.NMP(out).GetTrace()
		if len(tr) != len(envelope.NMP(env).GetTrace())+1 || tr[len(tr)-1].GetService() != envelope.ServiceName(role) {
			hops = append(hops, Hop{Service: envelope.ServiceName(role), Action: "bad answer", Via: used,
				Trust: nmpValue(envelope.Trust(env)), Error: "the service did not add exactly its own trace entry", RoundTripUS: rtt})
			continue
		}
		e := tr[len(tr)-1]
		hops = append(hops, Hop{Service: e.GetService(), Action: e.GetAction(), DurationUS: e.GetDurationUs(),
			Trust: nmpValue(e.GetTrust()), Lag: e.GetLag(), Ready: e.GetReady(), Via: used, RoundTripUS: rtt})
		env = out
	}
	return hops, nil
}

func (b *Broker) probeHop(ctx context.Context, role alpv1.Role, env *alpv1.Envelope, via string) (*alpv1.Envelope, string, error) {
	if via != ViaBus {
		conn, err := b.Client(role)
		if err == nil {
			res, err := Ping(ctx, conn, role, env)
			return res.Envelope, ViaGRPC, err
		}
		if via == ViaGRPC {
			return nil, ViaGRPC, err
		}
	}
	data, err := proto.Marshal(env)
	if err != nil {
		return nil, ViaBus, err
	}
	reply, err := b.deps.NATS.RequestWithContext(ctx, service.ProbeSubject(b.cfg.Name, role), data)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, ViaBus, errors.New("no replica of the service answers on the bus")
	case err != nil:
		return nil, ViaBus, err
	case reply.Header.Get(service.HeaderProbeError) != "":
		return nil, ViaBus, errors.New(reply.Header.Get(service.HeaderProbeError))
	}
	out := &alpv1.Envelope{}
	if err := proto.Unmarshal(reply.Data, out); err != nil {
		return nil, ViaBus, fmt.Errorf("probe answer: %w", err)
	}
	return out, ViaBus, nil
}

// nmpValue maps the proto enum to the NMP scale (unspecified counts as 0).
func nmpValue(t nmpv1.TrustLevel) int {
	if t == nmpv1.TrustLevel_TRUST_LEVEL_UNSPECIFIED {
		return 0
	}
	return int(t) - 1
}
