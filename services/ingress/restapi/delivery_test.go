package restapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/brokertest"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/ingress/restapi"
)

// outbound appends federation's delivery status of a's envelope id, as
// federation does (producer federation, on the envelope's status subject).
func (r *rig) outbound(t *testing.T, a brokertest.Agent, id string, st *alpv1.OutboundStatus) {
	t.Helper()
	st.EnvelopeId, st.SenderPersonId = id, a.Person.ID
	subject, err := streams.OutboundStatusSubject(a.Person.Tenant, a.Person.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	ev := &alpv1.Event{Header: &alpv1.EventHeader{Type: "outbound_status", SchemaVersion: 1, EventId: uuid.Must(uuid.NewV7()).String(),
		CorrelationId: id, Tenant: a.Person.Tenant, ProducerRole: alpv1.Role_ROLE_FEDERATION, Occurred: timestamppb.Now()},
		Body: &alpv1.Event_OutboundStatus{OutboundStatus: st}}
	if _, err := r.br.B.Bus().Publish(context.Background(), subject, ev); err != nil {
		t.Fatal(err)
	}
}

// decidedStatus polls the status of id until policy decided it.
func (r *rig) decidedStatus(t *testing.T, token, id string) map[string]any {
	t.Helper()
	var out map[string]any
	r.eventually(t, func() bool {
		a := r.do(t, http.MethodGet, restapi.PathMessages+"/"+id, token, nil)
		out = a.json(t)
		return a.status == http.StatusOK && out["outcome"] != "pending"
	}, "policy's decision")
	return out
}

// An envelope to a recipient at another broker: its status says where it
// stands, from federation's latest OutboundStatus (queued before any),
// in the REST and the NLIP door alike; one for a recipient here, or one
// the sender side refused, has no delivery.
func TestRemoteDeliveryStatus(t *testing.T) {
	r := newRig(t, restapi.Config{})
	a := r.do(t, http.MethodPost, restapi.PathMessages, r.ana.Token, map[string]any{"to": "lee@b.example", "type": "connection.request/v1",
		"body": map[string]any{"purpose": "introduction", "message": "hello"}})
	id, _ := a.json(t)["envelope_id"].(string)
	if id == "" {
		t.Fatalf("send: %s", a)
	}
	out := r.decidedStatus(t, r.ana.Token, id)
	delivery := func(out map[string]any) map[string]any {
		d, _ := out["delivery"].(map[string]any)
		return d
	}
	if out["outcome"] != "deliver" || delivery(out)["state"] != "queued" {
		t.Fatalf("before federation wrote a status: %v", out)
	}

	for _, c := range []struct {
		st    *alpv1.OutboundStatus
		check func(d map[string]any) bool
	}{
		{&alpv1.OutboundStatus{State: alpv1.DeliveryState_DELIVERY_STATE_SENT, RemoteBroker: "broker.b.example", Attempts: 1},
			func(d map[string]any) bool {
				return d["state"] == "sent" && d["remote_broker"] == "broker.b.example" && d["attempts"] == 1.0
			}},
		{&alpv1.OutboundStatus{State: alpv1.DeliveryState_DELIVERY_STATE_HELD, RemoteBroker: "broker.b.example", Held: []string{"/message"}, Attempts: 1},
			func(d map[string]any) bool {
				held, _ := d["held"].([]any)
				return d["state"] == "held" && slices.Equal(held, []any{"/message"})
			}},
		{&alpv1.OutboundStatus{State: alpv1.DeliveryState_DELIVERY_STATE_PARTIAL, Withheld: []string{"/message"}},
			func(d map[string]any) bool {
				w, _ := d["withheld"].([]any)
				return d["state"] == "partial" && slices.Equal(w, []any{"/message"})
			}},
		{&alpv1.OutboundStatus{State: alpv1.DeliveryState_DELIVERY_STATE_FAILED, Code: "outbox_expired", Message: "not sent within 24h", Attempts: 9},
			func(d map[string]any) bool {
				return d["state"] == "failed" && d["code"] == "outbox_expired" && d["message"] == "not sent within 24h"
			}},
	} {
		r.outbound(t, r.ana, id, c.st)
		st := r.do(t, http.MethodGet, restapi.PathMessages+"/"+id, r.ana.Token, nil)
		if st.status != http.StatusOK || !c.check(delivery(st.json(t))) {
			t.Fatalf("after %v: %s", c.st.GetState(), st)
		}
	}

	// The NLIP door answers the same status.
	req, _ := http.NewRequest(http.MethodGet, r.br.Srv.URL+"/nlip/envelopes/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+r.ana.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var msg struct {
		Submessages []struct {
			Label   string          `json:"label"`
			Content json.RawMessage `json:"content"`
		} `json:"submessages"`
	}
	if err := json.Unmarshal(raw, &msg); err != nil {
		t.Fatalf("NLIP status %d: %s", resp.StatusCode, raw)
	}
	i := slices.IndexFunc(msg.Submessages, func(s struct {
		Label   string          `json:"label"`
		Content json.RawMessage `json:"content"`
	}) bool {
		return s.Label == "alp.result"
	})
	var res struct {
		Delivery struct{ State, Code string }
	}
	if i >= 0 {
		_ = json.Unmarshal(msg.Submessages[i].Content, &res)
	}
	if res.Delivery.State != "failed" || res.Delivery.Code != "outbox_expired" || !strings.Contains(string(raw), "Delivery to the recipient's broker: failed (outbox_expired).") {
		t.Fatalf("NLIP status: %s", raw)
	}

	// A recipient on this broker: no delivery.
	local := r.do(t, http.MethodPost, restapi.PathMessages, r.ana.Token, send("bo@example.org")).json(t)["envelope_id"].(string)
	if out := r.decidedStatus(t, r.ana.Token, local); out["delivery"] != nil {
		t.Fatalf("a local recipient's status names a delivery: %v", out)
	}
	// Refused on the sender side (a stranger): nothing left, no delivery.
	refused := r.do(t, http.MethodPost, restapi.PathMessages, r.ana.Token, send("lee@b.example")).json(t)["envelope_id"].(string)
	if out := r.decidedStatus(t, r.ana.Token, refused); out["outcome"] != "refuse" || out["delivery"] != nil {
		t.Fatalf("a message refused on the sender side: %v", out)
	}
}
