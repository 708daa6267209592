package notify

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/mail"
	"net/smtp"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
)

// smtpTimeout bounds one whole SMTP conversation: with a webhook's 10s it
// keeps one handling under the consumers' default 30s AckWait, after which
// JetStream would hand the item to a second worker meanwhile.
const smtpTimeout = 15 * time.Second

// emailText is the subject and plain-text body of a notification: who
// asks, what kind, the binding code and the link; never held values.
func (n *Notifier) emailText(its []item) (subject, body string) {
	var b strings.Builder
	if len(its) == 1 {
		it := its[0]
		subject = "Approval needed: " + words(it.Kind) + " from " + it.From
		fmt.Fprintf(&b, "%s asks for your approval (%s, message type %s).\r\n\r\n", it.From, words(it.Kind), it.Type)
		writeItem(&b, n, it)
	} else {
		subject = fmt.Sprintf("Approval needed: %d requests", len(its))
		fmt.Fprintf(&b, "%d requests wait for your approval.\r\n", len(its))
		for _, it := range its {
			fmt.Fprintf(&b, "\r\n%s from %s (message type %s)\r\n", words(it.Kind), it.From, it.Type)
			writeItem(&b, n, it)
		}
	}
	b.WriteString("\r\nDecide on the page after signing in; check that it shows the same binding code\r\nas the agent that sent the request. Nothing is released until you decide.\r\n")
	return subject, b.String()
}

func writeItem(b *strings.Builder, n *Notifier, it item) {
	fmt.Fprintf(b, "Binding code: %s\r\nOpen: %s\r\nExpires: %s\r\n", it.BindingCode, n.link(it.ID), it.Expires.UTC().Format(time.RFC1123))
}

// words is an item kind as a sentence says it.
func words(kind string) string { return strings.ReplaceAll(kind, "_", " ") }

// message renders the email with its headers; a header value with a line
// break (which would add headers of its sender's choosing) is refused.
func (n *Notifier) message(to, subject, body string) ([]byte, error) {
	e := n.cfg.email
	now := n.d.Now()
	domain := e.from.Address[strings.LastIndexByte(e.from.Address, '@')+1:]
	headers := [][2]string{
		{"Date", now.Format(time.RFC1123Z)},
		{"Message-ID", "<" + uuid.NewString() + "@" + domain + ">"},
		{"From", e.from.String()},
		{"To", to},
		{"Subject", mimeWord(subject)},
		{"MIME-Version", "1.0"},
		{"Content-Type", "text/plain; charset=utf-8"},
		{"Content-Transfer-Encoding", "8bit"},
		{"Auto-Submitted", "auto-generated"},
	}
	var b strings.Builder
	for _, h := range headers {
		if hasCRLF(h[1]) {
			return nil, finalError{fmt.Errorf("email header %s would contain a line break", h[0])}
		}
		b.WriteString(h[0] + ": " + h[1] + "\r\n")
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	return []byte(b.String()), nil
}

// mimeWord encodes a subject that is not plain ASCII (RFC 2047); a line
// break is kept so that message refuses it.
func mimeWord(s string) string {
	if hasCRLF(s) {
		return s
	}
	return mime.QEncoding.Encode("utf-8", s)
}

// sendMail delivers one message over SMTP: STARTTLS as configured, AUTH
// PLAIN only once the connection is encrypted.
func (n *Notifier) sendMail(ctx context.Context, to, subject, body string) (err error) {
	e := n.cfg.email
	rcpt, perr := mail.ParseAddress(to)
	if perr != nil || hasCRLF(to) {
		return finalError{fmt.Errorf("email to %q: not an address", to)}
	}
	msg, err := n.message(rcpt.Address, subject, body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, smtpTimeout)
	defer cancel()
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", e.Addr)
	if err != nil {
		return fmt.Errorf("smtp %s: %w", e.Addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	c, err := smtp.NewClient(conn, e.host)
	if err != nil {
		conn.Close()
		return fmt.Errorf("smtp %s: %w", e.Addr, err)
	}
	defer c.Close()
	wrap := func(step string, err error) error { return fmt.Errorf("smtp %s: %s: %w", e.Addr, step, err) }
	if err := c.Hello(helloName(n.cfg.PublicURL)); err != nil {
		return wrap("EHLO", err)
	}
	tlsOn := false
	if e.startTLS != StartTLSOff {
		if ok, _ := c.Extension("STARTTLS"); ok {
			if err := c.StartTLS(&tls.Config{ServerName: e.ServerName, RootCAs: e.RootCAs, MinVersion: tls.VersionTLS12}); err != nil {
				return wrap("STARTTLS", err)
			}
			tlsOn = true
		} else if e.startTLS == StartTLSRequired {
			return wrap("STARTTLS", errors.New("the server does not offer STARTTLS and starttls is required"))
		}
	}
	if e.Username != "" {
		if !tlsOn {
			return wrap("AUTH", errors.New("refusing to send the password without TLS"))
		}
		if err := c.Auth(smtp.PlainAuth("", e.Username, e.Password, e.host)); err != nil {
			return wrap("AUTH", err)
		}
	}
	if err := c.Mail(e.from.Address); err != nil {
		return wrap("MAIL FROM", err)
	}
	if err := c.Rcpt(rcpt.Address); err != nil {
		return wrap("RCPT TO", err)
	}
	w, err := c.Data()
	if err != nil {
		return wrap("DATA", err)
	}
	if _, err := w.Write(msg); err != nil {
		return wrap("DATA", err)
	}
	if err := w.Close(); err != nil {
		return wrap("DATA", err)
	}
	if err := c.Quit(); err != nil {
		return wrap("QUIT", err)
	}
	return nil
}

// helloName is the name the broker greets the SMTP server with: its
// public host.
func helloName(publicURL string) string {
	if u, err := url.Parse(publicURL); err == nil && u.Hostname() != "" {
		return u.Hostname()
	}
	return "localhost"
}
