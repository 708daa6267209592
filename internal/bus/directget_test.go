package bus

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/alpd-project/alpd/internal/natstest"
)

// TestLastMessageInNeedsOnlyDirectGet: a NATS user allowed nothing on a
// stream but direct gets (ingress on policy's decided stream in split
// mode) reads a subject's last message with LastMessageIn. Looking the
// stream up first (STREAM.INFO) was a permissions violation that left the
// request waiting for its timeout, so in split mode GET
// /nlip/envelopes/{id} never answered.
func TestLastMessageInNeedsOnlyDirectGet(t *testing.T) {
	opts := natstest.Options(t.TempDir())
	opts.Users = []*server.User{
		{Username: "owner", Password: "pw"},
		{Username: "reader", Password: "pw", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.DIRECT.GET.T_SEND.>"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
		}},
	}
	s := natstest.RunServer(t, opts)
	owner := newBus(t, natstest.Connect(t, s, nats.UserInfo("owner", "pw")), nil)
	ensure(t, owner, logSpec())
	ctx := context.Background()
	seq, err := owner.Append(ctx, "alp.send.example_org.p1.e1", 0, sendEvent("e1", ""))
	if err != nil {
		t.Fatal(err)
	}
	reader, err := New(natstest.Connect(t, s, nats.UserInfo("reader", "pw")), Options{Namespace: "t"})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	m, err := reader.LastMessageIn(rctx, "send", "alp.send.example_org.p1.e1")
	if err != nil || m == nil || m.Sequence != seq || m.Subject != "alp.send.example_org.p1.e1" || m.Header.Get(HeaderEventID) != "e1" {
		t.Fatalf("LastMessageIn as a direct-get-only user: %+v %v; want sequence %d", m, err, seq)
	}
	if m, err := reader.LastMessageIn(rctx, "send", "alp.send.example_org.p1.none"); m != nil || err != nil {
		t.Fatalf("LastMessageIn of an empty subject as a direct-get-only user: %+v %v; want nil, nil", m, err)
	}
}
