package notify

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/alpd-project/alpd/internal/alp"
)

// Config is what alpd.yaml's approvals.notifications says, as the daemon
// maps it (this package reads no YAML).
type Config struct {
	Webhooks []Webhook
	// Email, if set, mails every person at To[address], or at their ALP
	// address when To has none.
	Email *Email
	// QuietHours, if set, hold every notification until they end.
	QuietHours *QuietHours
	// Digest, when above 0, waits that long after an item was created and
	// then sends one message per channel for all of the person's items
	// still not notified there (Deps.Pending lists them).
	Digest time.Duration
	// RetryMin and RetryMax bound the backoff between failed attempts
	// (defaults 1s and 5m); MaxAge is how long after an item's creation
	// attempts go on (default 24h).
	RetryMin, RetryMax, MaxAge time.Duration
	// PublicURL is the broker's public base URL: an item's link is
	// PublicURL + "/approvals/items/" + its id.
	PublicURL string
}

// Webhook is one receiver of signed JSON notifications.
type Webhook struct {
	// URL must be https (http only to a loopback host).
	URL string
	// Secret keys the HMAC-SHA256 signature (at least 16 bytes).
	Secret []byte
	// Person is the one person (ALP address) this webhook is for, or ""
	// for every person of Tenant.
	Person string
	// Tenant is the tenant the webhook serves; with Person set it may be
	// left empty (the address's domain) and otherwise must be that domain.
	Tenant string
}

// Email is an SMTP submission server.
type Email struct {
	// Addr is "host:port".
	Addr string
	// From is the sender (RFC 5322 address, e.g. "alpd <approvals@b.example>").
	From string
	// Username and Password authenticate with AUTH PLAIN, only over TLS.
	Username, Password string
	// StartTLS is "required" (default: refuse a server without it),
	// "opportunistic" (use it when offered) or "off".
	StartTLS string
	// ServerName is the name the server's certificate must carry (default:
	// Addr's host); RootCAs, if set, replaces the system roots.
	ServerName string
	RootCAs    *x509.CertPool
	// To maps a person's ALP address to their email address; a person not
	// in it is mailed at their ALP address.
	To map[string]string
}

// StartTLS modes.
const (
	StartTLSRequired      = "required"
	StartTLSOpportunistic = "opportunistic"
	StartTLSOff           = "off"
)

// QuietHours is a daily window, in Location (default UTC), during which
// nothing is sent; it may wrap midnight ("22:00" to "07:00").
type QuietHours struct {
	Start, End string
	Location   *time.Location
}

// minSecretBytes: a shorter webhook secret is guessable offline from one
// signed request.
const minSecretBytes = 16

// config is a checked Config with defaults applied.
type config struct {
	Config
	webhooks []webhook
	email    *email
	quiet    *quiet
}

type webhook struct {
	Webhook
	person string // normalized address, "" for every person of tenant
}

type email struct {
	Email
	host     string
	from     *mail.Address
	startTLS string
	to       map[string]string // normalized ALP address → mail address
}

type quiet struct {
	start, end int // minutes after midnight
	loc        *time.Location
}

func (c Config) check() (*config, error) {
	out := &config{Config: c}
	var errs []error
	if c.RetryMin == 0 {
		out.RetryMin = time.Second
	}
	if c.RetryMax == 0 {
		out.RetryMax = 5 * time.Minute
	}
	if c.MaxAge == 0 {
		out.MaxAge = 24 * time.Hour
	}
	switch {
	case c.RetryMin < 0 || c.RetryMax < 0 || c.MaxAge < 0 || c.Digest < 0:
		errs = append(errs, errors.New("notify: retry_min, retry_max, max_age and digest must not be negative"))
	case out.RetryMin > out.RetryMax:
		errs = append(errs, fmt.Errorf("notify: retry_min %s is above retry_max %s", out.RetryMin, out.RetryMax))
	}
	if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		errs = append(errs, fmt.Errorf("notify: public_url %q is not an absolute http(s) URL (item links are built on it)", c.PublicURL))
	}
	out.PublicURL = strings.TrimRight(c.PublicURL, "/")
	if len(c.Webhooks) == 0 && c.Email == nil {
		errs = append(errs, errors.New("notify: no webhook and no email configured"))
	}
	for i, w := range c.Webhooks {
		cw, err := checkWebhook(w)
		if err != nil {
			errs = append(errs, fmt.Errorf("notify: webhooks[%d]: %w", i, err))
			continue
		}
		out.webhooks = append(out.webhooks, cw)
	}
	if c.Email != nil {
		e, err := checkEmail(*c.Email)
		if err != nil {
			errs = append(errs, fmt.Errorf("notify: email: %w", err))
		}
		out.email = e
	}
	if c.QuietHours != nil {
		q, err := checkQuiet(*c.QuietHours)
		if err != nil {
			errs = append(errs, fmt.Errorf("notify: quiet_hours: %w", err))
		}
		out.quiet = q
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func checkWebhook(w Webhook) (webhook, error) {
	out := webhook{Webhook: w}
	u, err := url.Parse(w.URL)
	if err != nil {
		return out, fmt.Errorf("url %q: %w", w.URL, err)
	}
	switch {
	case u.Host == "" || u.Hostname() == "":
		return out, fmt.Errorf("url %q has no host", w.URL)
	case u.User != nil:
		return out, fmt.Errorf("url %q carries credentials; the secret signs the requests instead", w.URL)
	case u.Scheme == "https":
	case u.Scheme == "http" && isLoopback(u.Hostname()):
	case u.Scheme == "http":
		return out, fmt.Errorf("url %q is plain http to a host that is not loopback (use https)", w.URL)
	default:
		return out, fmt.Errorf("url %q: scheme must be https", w.URL)
	}
	if len(w.Secret) < minSecretBytes {
		return out, fmt.Errorf("secret of %d bytes, at least %d needed", len(w.Secret), minSecretBytes)
	}
	if w.Person != "" {
		a, err := alp.ParseAddress(w.Person)
		if err != nil {
			return out, fmt.Errorf("person: %w", err)
		}
		out.person = a.String()
		switch {
		case w.Tenant == "":
			out.Tenant = a.Domain()
		case !strings.EqualFold(w.Tenant, a.Domain()):
			return out, fmt.Errorf("person %s is not of tenant %s", w.Person, w.Tenant)
		}
	}
	if out.Tenant == "" {
		return out, errors.New("tenant is required when person is empty (the webhook is for every person of one tenant)")
	}
	if err := alp.ValidateTenant(strings.ToLower(out.Tenant)); err != nil {
		return out, fmt.Errorf("tenant: %w", err)
	}
	out.Tenant = strings.ToLower(out.Tenant)
	return out, nil
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func checkEmail(e Email) (*email, error) {
	out := &email{Email: e, startTLS: e.StartTLS, to: map[string]string{}}
	host, port, err := net.SplitHostPort(e.Addr)
	if err != nil {
		return nil, fmt.Errorf("addr %q is not host:port: %w", e.Addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || host == "" {
		return nil, fmt.Errorf("addr %q is not host:port", e.Addr)
	}
	out.host = host
	if out.ServerName == "" {
		out.ServerName = host
	}
	if hasCRLF(e.From) {
		return nil, errors.New("from contains a line break")
	}
	if out.from, err = mail.ParseAddress(e.From); err != nil {
		return nil, fmt.Errorf("from %q: %w", e.From, err)
	}
	switch e.StartTLS {
	case "":
		out.startTLS = StartTLSRequired
	case StartTLSRequired, StartTLSOpportunistic, StartTLSOff:
	default:
		return nil, fmt.Errorf("starttls %q: one of required, opportunistic, off", e.StartTLS)
	}
	switch {
	case e.Password != "" && e.Username == "":
		return nil, errors.New("password without username")
	case e.Username != "" && out.startTLS == StartTLSOff:
		return nil, errors.New("username set with starttls off: the password would cross the network in clear")
	}
	for person, to := range e.To {
		a, err := alp.ParseAddress(person)
		if err != nil {
			return nil, fmt.Errorf("to: %w", err)
		}
		if hasCRLF(to) {
			return nil, fmt.Errorf("to[%s] contains a line break", person)
		}
		m, err := mail.ParseAddress(to)
		if err != nil {
			return nil, fmt.Errorf("to[%s] %q: %w", person, to, err)
		}
		out.to[a.String()] = m.Address
	}
	return out, nil
}

func checkQuiet(q QuietHours) (*quiet, error) {
	start, err := clock(q.Start)
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	end, err := clock(q.End)
	if err != nil {
		return nil, fmt.Errorf("end: %w", err)
	}
	if start == end {
		return nil, fmt.Errorf("start and end are both %s (an empty or whole-day window)", q.Start)
	}
	loc := q.Location
	if loc == nil {
		loc = time.UTC
	}
	return &quiet{start: start, end: end, loc: loc}, nil
}

// clock reads "HH:MM" as minutes after midnight.
func clock(s string) (int, error) {
	t, err := time.Parse("15:04", s)
	if err != nil || len(s) != 5 {
		return 0, fmt.Errorf("%q is not a time of day HH:MM", s)
	}
	return t.Hour()*60 + t.Minute(), nil
}

// until is how long from now the quiet hours last, 0 outside them.
func (q *quiet) until(now time.Time) time.Duration {
	if q == nil {
		return 0
	}
	local := now.In(q.loc)
	y, m, d := local.Date()
	at := func(day, minutes int) time.Time {
		return time.Date(y, m, d+day, minutes/60, minutes%60, 0, 0, q.loc)
	}
	// The wall clock, not time since midnight: a DST day has 23 or 25 hours.
	mins := local.Hour()*60 + local.Minute()
	var end time.Time
	switch {
	case q.start < q.end && mins >= q.start && mins < q.end:
		end = at(0, q.end)
	case q.start > q.end && mins >= q.start:
		end = at(1, q.end)
	case q.start > q.end && mins < q.end:
		end = at(0, q.end)
	default:
		return 0
	}
	return end.Sub(now)
}

func hasCRLF(s string) bool { return strings.ContainsAny(s, "\r\n") }
