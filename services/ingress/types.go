package ingress

import (
	"errors"
	"fmt"

	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/internal/msgtypes/typestore"
)

// ErrUnknownType: no message type of the name is known here, or none the
// agent may see (Type).
var ErrUnknownType = errors.New("ingress: no such message type")

// The message types as agents see them: the built-ins and the types their
// own organization registered. Other organizations' types stay unlisted and
// unread (a hosted tenant's types are its own business, as in policy's
// admin API); the door still checks a body of such a type when an agent
// sends one (typeNamed).

// Types are the message types an agent of snd's organization is shown,
// sorted by name. ErrTypesUnavailable until the projection is open.
func (s *Service) Types(snd Sender) ([]*msgtypes.Type, error) {
	st, err := s.typeStore()
	if err != nil {
		return nil, err
	}
	reg := st.Registry()
	var out []*msgtypes.Type
	for _, name := range reg.Names() {
		if t, ok := reg.Lookup(name); ok && visible(t, snd) {
			out = append(out, t)
		}
	}
	return out, nil
}

// Type is the message type of that name as an agent of snd's organization
// may read it: ErrUnknownType when no type has the name or it is another
// organization's (the same answer, so names do not leak), and
// ErrTypesUnavailable while the types cannot be consulted.
func (s *Service) Type(snd Sender, name string) (*msgtypes.Type, error) {
	t, err := s.typeNamed(name)
	if err != nil {
		return nil, err
	}
	if !visible(t, snd) {
		return nil, fmt.Errorf("%w: %.80q", ErrUnknownType, name)
	}
	return t, nil
}

func visible(t *msgtypes.Type, snd Sender) bool { return t.Builtin() || t.Owner() == snd.Tenant }

// typeNamed is the message type the door validates a body of that name
// against, whoever registered it: ErrUnknownType when no type has it (only
// a fresh projection may say so: a type registered a moment ago may not
// have reached this replica yet), ErrTypesUnavailable while the types
// cannot be consulted.
func (s *Service) typeNamed(name string) (*msgtypes.Type, error) {
	st, err := s.typeStore()
	if err != nil {
		return nil, err
	}
	if t, ok := st.Registry().Lookup(name); ok {
		return t, nil
	}
	if err := st.Fresh(s.opts.MaxStaleness); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTypesUnavailable, err)
	}
	return nil, fmt.Errorf("%w: %.80q", ErrUnknownType, name)
}

func (s *Service) typeStore() (*typestore.Store, error) {
	if st := s.types.Load(); st != nil {
		return st, nil
	}
	return nil, fmt.Errorf("%w: policy's message types are not followed yet", ErrTypesUnavailable)
}
