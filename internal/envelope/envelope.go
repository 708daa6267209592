// Package envelope reads and writes the protocol headers carried as
// extensions of alpv1.Envelope and records each service hop in them.
//
// Trust follows NMP: it may only decrease as a message travels. Only the two
// trust-setting points of a broker (ingress, from the agent's credential, and
// federation, from verifying the remote broker) may set it; every other hop
// can only lower it with min(), and says why. Each hop appends one NMP trace
// entry. Extensions a service does not know stay in the envelope as unknown
// fields and are passed on unchanged by protobuf.
package envelope

import (
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	nlipv1 "github.com/alpd-project/alpd/gen/alp/nlip/v1"
	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

// NMP returns the envelope's NMP header, nil when it has none.
func NMP(env *alpv1.Envelope) *nmpv1.NmpHeader {
	if env == nil || !proto.HasExtension(env, nmpv1.E_Nmp) {
		return nil
	}
	h, _ := proto.GetExtension(env, nmpv1.E_Nmp).(*nmpv1.NmpHeader)
	return h
}

// SetNMP replaces the envelope's NMP header.
func SetNMP(env *alpv1.Envelope, h *nmpv1.NmpHeader) { proto.SetExtension(env, nmpv1.E_Nmp, h) }

// NLIP returns the envelope's NLIP header, nil when it has none.
func NLIP(env *alpv1.Envelope) *nlipv1.NlipHeader {
	if env == nil || !proto.HasExtension(env, nlipv1.E_Nlip) {
		return nil
	}
	h, _ := proto.GetExtension(env, nlipv1.E_Nlip).(*nlipv1.NlipHeader)
	return h
}

// SetNLIP replaces the envelope's NLIP header.
func SetNLIP(env *alpv1.Envelope, h *nlipv1.NlipHeader) { proto.SetExtension(env, nlipv1.E_Nlip, h) }

// TrustSetter reports whether role is a trust-setting point.
func TrustSetter(role alpv1.Role) bool {
	return role == alpv1.Role_ROLE_INGRESS || role == alpv1.Role_ROLE_FEDERATION
}

// Trust is the effective trust of an envelope. A header that no
// trust-setting point has filled in counts as hostile: fail closed.
func Trust(env *alpv1.Envelope) nmpv1.TrustLevel {
	h := NMP(env)
	if h == nil || h.GetTrust() == nmpv1.TrustLevel_TRUST_LEVEL_UNSPECIFIED {
		return nmpv1.TrustLevel_TRUST_LEVEL_HOSTILE
	}
	return h.GetTrust()
}

// Hop is one service's passage of an envelope. Begin it when the service
// takes the envelope, End it when the service hands it on.
type Hop struct {
	Role   alpv1.Role
	Action string
	start  time.Time

	set, lower   nmpv1.TrustLevel
	setReason    string
	lowerReasons string
	tokens       uint64
	ready        bool
	lag          uint64
}

// Begin starts timing a hop of service role doing action.
func Begin(role alpv1.Role, action string) *Hop {
	return &Hop{Role: role, Action: action, start: time.Now()}
}

// ErrNotTrustSetter is returned when a service that is not a trust-setting
// point tries to set trust.
var ErrNotTrustSetter = errors.New("envelope: only ingress and federation may set trust")

// SetTrust sets trust at a trust-setting point, replacing whatever the
// message claimed; reason names the credential or verification it rests on.
func (h *Hop) SetTrust(level nmpv1.TrustLevel, reason string) error {
	if !TrustSetter(h.Role) {
		return fmt.Errorf("%w (%s tried to set %s)", ErrNotTrustSetter, ServiceName(h.Role), level)
	}
	if level == nmpv1.TrustLevel_TRUST_LEVEL_UNSPECIFIED {
		return errors.New("envelope: cannot set trust to unspecified")
	}
	h.set, h.setReason = level, reason
	return nil
}

// LowerTrust caps trust at level for this hop (any service may), recording
// why. Several calls keep the lowest cap and all reasons.
func (h *Hop) LowerTrust(level nmpv1.TrustLevel, reason string) {
	if level == nmpv1.TrustLevel_TRUST_LEVEL_UNSPECIFIED {
		level = nmpv1.TrustLevel_TRUST_LEVEL_HOSTILE
	}
	if h.lower == nmpv1.TrustLevel_TRUST_LEVEL_UNSPECIFIED || level < h.lower {
		h.lower = level
	}
	if h.lowerReasons != "" {
		h.lowerReasons += "; "
	}
	h.lowerReasons += reason
}

// Status records the service's readiness and consumer lag at this hop.
func (h *Hop) Status(ready bool, lag uint64) { h.ready, h.lag = ready, lag }

// AddTokens records tokens this hop spent.
func (h *Hop) AddTokens(n uint64) { h.tokens += n }

// End applies the hop to env: trust is set (trust-setting points) and then
// lowered with min(), and one trace entry is appended. It returns the trust
// after the hop.
func (h *Hop) End(env *alpv1.Envelope) nmpv1.TrustLevel {
	hdr := NMP(env)
	if hdr == nil {
		hdr = &nmpv1.NmpHeader{}
	} else {
		hdr = proto.CloneOf(hdr)
	}
	var reason string
	before := Trust(env)
	level := before
	if h.set != nmpv1.TrustLevel_TRUST_LEVEL_UNSPECIFIED {
		level, reason = h.set, h.setReason
	} else if hdr.GetTrust() == nmpv1.TrustLevel_TRUST_LEVEL_UNSPECIFIED {
		reason = "trust was never set by a trust-setting point"
	}
	if h.lower != nmpv1.TrustLevel_TRUST_LEVEL_UNSPECIFIED && h.lower < level {
		level = h.lower
		reason = join(reason, h.lowerReasons)
	}
	hdr.Trust = level
	hdr.Trace = append(hdr.Trace, &nmpv1.TraceEntry{
		Service:     ServiceName(h.Role),
		Action:      h.Action,
		DurationUs:  uint64(time.Since(h.start).Microseconds()),
		Trust:       level,
		TrustReason: reason,
		Tokens:      h.tokens,
		At:          timestamppb.Now(),
		Ready:       h.ready,
		Lag:         h.lag,
	})
	if h.tokens > 0 {
		if hdr.Budget == nil {
			hdr.Budget = &nmpv1.Budget{}
		}
		// Saturate: a running total that wraps would reopen a spent budget.
		used := hdr.Budget.TokensUsed + h.tokens
		if used < h.tokens {
			used = math.MaxUint64
		}
		hdr.Budget.TokensUsed = used
	}
	SetNMP(env, hdr)
	return level
}

func join(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// ServiceName is the lowercase service name of a role ("policy").
func ServiceName(r alpv1.Role) string {
	switch r {
	case alpv1.Role_ROLE_INGRESS:
		return "ingress"
	case alpv1.Role_ROLE_IDENTITY:
		return "identity"
	case alpv1.Role_ROLE_POLICY:
		return "policy"
	case alpv1.Role_ROLE_FEDERATION:
		return "federation"
	case alpv1.Role_ROLE_LEDGER:
		return "ledger"
	case alpv1.Role_ROLE_APPROVALS:
		return "approvals"
	case alpv1.Role_ROLE_OPERATOR:
		return "operator"
	}
	return "unspecified"
}

// Roles lists the six service roles in the order a message meets them.
func Roles() []alpv1.Role {
	return []alpv1.Role{
		alpv1.Role_ROLE_INGRESS, alpv1.Role_ROLE_POLICY, alpv1.Role_ROLE_FEDERATION,
		alpv1.Role_ROLE_LEDGER, alpv1.Role_ROLE_APPROVALS, alpv1.Role_ROLE_IDENTITY,
	}
}

// RoleByName is the inverse of ServiceName for the six services.
func RoleByName(name string) (alpv1.Role, bool) {
	for _, r := range Roles() {
		if ServiceName(r) == name {
			return r, true
		}
	}
	return alpv1.Role_ROLE_UNSPECIFIED, false
}
