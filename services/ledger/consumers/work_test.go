package consumers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/streams"
)

// TestPartitionTransform checks, on a real nats-server, that the work
// queue's sources add the partition NATS computes as the last token, that
// Partition agrees with it, and that the partition filters split the
// queue.
func TestPartitionTransform(t *testing.T) {
	s := natstest.RunJetStream(t)
	b, err := bus.New(natstest.Connect(t, s), bus.Options{Namespace: "t"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tenants := []string{"example.org"}
	for _, name := range []string{streams.Send, streams.Identity} {
		def, _ := streams.ByName(name)
		if _, err := b.EnsureStream(ctx, def.Spec(tenants, streams.Limits{})); err != nil {
			t.Fatal(err)
		}
	}
	const n = 8
	js := b.JetStream()
	work, _ := streams.ByName(streams.LedgerWork)
	work = work.WithPartitions(n)
	if _, err := js.CreateStream(ctx, b.Config(work.Spec(tenants, streams.Limits{}))); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for i := range 40 {
		person := fmt.Sprintf("person%d", i)
		subject := fmt.Sprintf("alp.send.example_org.%s.env%d", person, i)
		if _, err := js.Publish(ctx, subject, []byte("x")); err != nil {
			t.Fatal(err)
		}
		want[fmt.Sprintf("%s.%d", subject, Partition("example.org", person, n))] = true
	}
	if _, err := js.Publish(ctx, "alp.identity.example_org.erasure.person3", []byte("x")); err != nil {
		t.Fatal(err)
	}
	want[fmt.Sprintf("alp.identity.example_org.erasure.person3.%d", Partition("example.org", "person3", n))] = true
	if _, err := js.Publish(ctx, "alp.identity.example_org.keys.k1", []byte("not for the ledger")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := js.Stream(ctx, b.StreamName(streams.LedgerWork))
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx, jetstreamSubjects())
		if err != nil {
			t.Fatal(err)
		}
		if len(info.State.Subjects) == len(want) {
			for subj := range info.State.Subjects {
				if !want[subj] {
					t.Errorf("queued on %s, not where Partition says", subj)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue holds %v", info.State.Subjects)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for subj := range want {
		parts := strings.Split(subj, ".")
		p := parts[len(parts)-1]
		matched := 0
		for q := range n {
			for _, f := range work.PartitionFilters(q) {
				if subjectMatches(f, subj) {
					matched++
					if fmt.Sprint(q) != p {
						t.Errorf("%s matches the filter of partition %d", subj, q)
					}
				}
			}
		}
		if matched != 1 {
			t.Errorf("%s matches %d filters", subj, matched)
		}
	}
}

func subjectMatches(filter, subject string) bool {
	f, s := strings.Split(filter, "."), strings.Split(subject, ".")
	if len(f) != len(s) {
		return false
	}
	for i := range f {
		if f[i] != "*" && f[i] != s[i] {
			return false
		}
	}
	return true
}

func TestCounterparty(t *testing.T) {
	for in, want := range map[string]string{
		"bob@Other.Example": "other.example", "bob@other.example ": "other.example",
		"no-at-sign": "", "x@bad domain": "", "x@": "",
	} {
		if got := Counterparty(in); got != want {
			t.Errorf("Counterparty(%q) = %q, want %q", in, got, want)
		}
	}
}

func jetstreamSubjects() jetstream.StreamInfoOpt { return jetstream.WithSubjectFilter(">") }
