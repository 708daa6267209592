package rulestore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/streams"
)

// apply folds one event into the projection (under the follower's write
// lock). It depends on nothing but the state and the event, so every
// replica applying the same stream ends in the same state. An event that
// does not fit (wrong subject, producer or tenant, a version out of turn, a
// digest that does not match) is refused and changes nothing: Put never
// appends one, so it can only come from a bug or a foreign writer. The
// text is not validated here: replaying history must stay cheap, and
// Current validates (once per version) what it compiles.
func (s *Store) apply(subject string, _ uint64, ev *alpv1.Event) error {
	if err := streams.CheckProducer(subject, ev); err != nil {
		return err
	}
	tok, partyTok, ownerTok, ok := streams.ParsePolicyRulesSubject(subject)
	if !ok {
		return fmt.Errorf("not a rules subject")
	}
	tenant := ev.GetHeader().GetTenant()
	sets := s.tenants[tenant]
	if sets == nil || bus.TenantToken(tenant) != tok {
		return fmt.Errorf("tenant %q is not hosted here or not the subject's", tenant)
	}
	b, ok := ev.GetBody().(*alpv1.Event_RuleSetVersionStored)
	if !ok {
		return fmt.Errorf("%s is no rule set event", bus.Kind(ev))
	}
	r := b.RuleSetVersionStored
	party := partyOf(r.GetParty())
	owner := r.GetOwner()
	if r.GetTenant() != tenant || party == "" || string(party) != partyTok || ownerToken(party, owner) != ownerTok ||
		(orgParty(party) && owner != tenant) {
		return fmt.Errorf("%s set of %q of %q stands on the wrong subject", party, owner, r.GetTenant())
	}
	sum := sha256.Sum256(r.GetText())
	if hex.EncodeToString(sum[:]) != r.GetDigest() {
		return fmt.Errorf("%s set of %s version %d: digest does not match its text", party, owner, r.GetVersion())
	}
	k := key{party, owner}
	var prev uint64
	if cur := sets[k]; cur != nil {
		prev = cur.Version
	}
	if r.GetVersion() != prev+1 {
		return fmt.Errorf("%s set of %s: version %d after %d", party, owner, r.GetVersion(), prev)
	}
	writer := writerOf(r.GetBy())
	if writer == 0 {
		return fmt.Errorf("%s set of %s version %d: no writer", party, owner, r.GetVersion())
	}
	sets[k] = &Version{
		Party: party, Owner: owner, Version: r.GetVersion(), Text: r.GetText(), Digest: r.GetDigest(),
		By: writer, Actor: ev.GetHeader().GetActor().GetId(), Stored: ev.GetHeader().GetOccurred().AsTime(),
		TighteningOnly: r.GetTighteningOnly(),
	}
	return nil
}
