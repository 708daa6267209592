package service

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/natsauth"
	"github.com/alpd-project/alpd/internal/streams"
)

// HeaderProbeError carries why a probe could not be handled.
const HeaderProbeError = "Alp-Probe-Error"

// ProbeSubject is the core-NATS subject on which service role of broker
// namespace ns answers probes. No stream captures alp.probe.>: probes are
// request/reply only, never stored, federated or ledgered.
func ProbeSubject(ns string, role alpv1.Role) string {
	return streams.ProbeSubject(ns, envelope.ServiceName(role))
}

// ServeProbes answers probes for s on its probe subject. Replicas of a
// service share a queue group, so a probe meets one of them. The caller
// unsubscribes (or drains the connection) on shutdown.
func ServeProbes(nc *nats.Conn, ns string, s Service) (*nats.Subscription, error) {
	subject := ProbeSubject(ns, s.Role())
	sub, err := nc.QueueSubscribe(subject, ns+"_"+envelope.ServiceName(s.Role()), func(m *nats.Msg) {
		// Answer only to an inbox: a requester must not be able to steer
		// the answer onto an event subject this role may publish on.
		if !strings.HasPrefix(m.Reply, nats.InboxPrefix) && !natsauth.IsInbox(ns, m.Reply) {
			return
		}
		reply := nats.NewMsg(m.Reply)
		env := &alpv1.Envelope{}
		if err := proto.Unmarshal(m.Data, env); err != nil {
			reply.Header.Set(HeaderProbeError, "probe is not an envelope: "+err.Error())
		} else {
			out, _ := s.Pass(env, "probe")
			if reply.Data, err = proto.Marshal(out); err != nil {
				reply.Header.Set(HeaderProbeError, err.Error())
			}
		}
		_ = m.RespondMsg(reply)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: probe subscription %s: %w", envelope.ServiceName(s.Role()), subject, err)
	}
	return sub, nil
}
