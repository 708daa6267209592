package broker

import (
	"time"

	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/services/approvals"
	"github.com/alpd-project/alpd/services/approvals/items"
	"github.com/alpd-project/alpd/services/approvals/notify"
	approvalspages "github.com/alpd-project/alpd/services/approvals/pages"
	"github.com/alpd-project/alpd/services/approvals/storage"
)

// ApprovalsConfig tunes the approvals service (zero values: defaults).
type ApprovalsConfig struct {
	// Expiry per kind of item, and of standing rules.
	Expiry storage.Expiry
	// SweepEvery is how often pending items are checked for expiry.
	SweepEvery time.Duration
	// Notifications, if set, tell people of new items (its PublicURL
	// defaults to the broker's).
	Notifications *notify.Config
}

// approvalsOptions wire the approvals service: people's web sessions
// through the local identity service, links under the public URL.
func (b *Broker) approvalsOptions() approvals.Options {
	o := approvals.Options{PublicURL: b.publicURL(), Expiry: b.cfg.Approvals.Expiry, SweepEvery: b.cfg.Approvals.SweepEvery,
		Notifications: b.cfg.Approvals.Notifications,
		FreshMaxAge:   b.cfg.FreshMaxAge}
	if b.Runs("identity") {
		o.Sessions = identitySessions{b}
	}
	if ui := b.ui(); ui != nil {
		o.Pages = func(st items.Store) []httproute.Route {
			return approvalspages.New(approvalspages.Options{Store: st, UI: ui, Logger: b.log.With("service", "approvals", "component", "pages")}).Routes()
		}
	}
	return o
}
