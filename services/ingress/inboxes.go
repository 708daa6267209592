package ingress

import (
	"context"
	"fmt"

	"github.com/alpd-project/alpd/services/ingress/inbox"
)

// InboxAgent is the reader of an inbox an agent's credential proves.
func InboxAgent(snd Sender) inbox.Agent {
	return inbox.Agent{Tenant: snd.Tenant, PersonID: snd.PersonID, AgentID: snd.AgentID, Class: snd.Class}
}

// ReplyTo is where a reply to item itemID of the agent's person's inbox
// goes: to the item's sender, in reply to its envelope. It reads the item,
// so it takes alp.read (an *agentauth.Error without it); the reply is then
// sent like any message (the Door, alp.send), so it passes policy on both
// sides.
func (s *Service) ReplyTo(ctx context.Context, snd Sender, itemID string) (to, inReplyTo string, err error) {
	if err := s.door.MayRead(snd); err != nil {
		return "", "", err
	}
	it, err := s.inbox.Get(ctx, InboxAgent(snd), itemID)
	if err != nil {
		return "", "", err
	}
	if it.Sender.Address == "" {
		return "", "", fmt.Errorf("%w: item %s has no sender to reply to", inbox.ErrNotFound, itemID)
	}
	return it.Sender.Address, it.ID, nil
}
