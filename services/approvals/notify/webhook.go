package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks headers (standardwebhooks.com).
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// webhookItem is one item as a webhook tells it: who asks for what and
// where to decide, never the held values or any field's value.
type webhookItem struct {
	Type        string `json:"type,omitempty"`
	ItemID      string `json:"item_id"`
	Kind        string `json:"kind"`
	EnvelopeID  string `json:"envelope_id"`
	From        string `json:"from"`
	MessageType string `json:"message_type"`
	BindingCode string `json:"binding_code"`
	Expires     string `json:"expires"`
	Link        string `json:"link"`
}

// webhookBody is {"type":"approval.pending", item…} for one item, and
// {"type":"approval.pending.digest","items":[…]} for a digest of several.
func webhookBody(n *Notifier, its []item) []byte {
	wi := func(it item) webhookItem {
		return webhookItem{ItemID: it.ID, Kind: it.Kind, EnvelopeID: it.EnvelopeID, From: it.From, MessageType: it.Type,
			BindingCode: it.BindingCode, Expires: it.Expires.UTC().Format(time.RFC3339), Link: n.link(it.ID)}
	}
	if len(its) == 1 {
		one := wi(its[0])
		one.Type = "approval.pending"
		b, _ := jsonBody(one)
		return b
	}
	list := make([]webhookItem, len(its))
	for i, it := range its {
		list[i] = wi(it)
	}
	b, _ := jsonBody(struct {
		Type  string        `json:"type"`
		Items []webhookItem `json:"items"`
	}{"approval.pending.digest", list})
	return b
}

func jsonBody(v any) ([]byte, error) { return json.Marshal(v) }

// sign is the Standard Webhooks signature of one message.
func sign(secret []byte, id, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(id + "." + timestamp + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// maxErrorBody is how much of a refusing receiver's answer goes into the
// attempt's error.
const maxErrorBody = 200

// postWebhook posts one signed message: 2xx delivered, 410 Gone final,
// anything else (and no answer) retried.
func (n *Notifier) postWebhook(ctx context.Context, w *webhook, id string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return finalError{fmt.Errorf("webhook %s: %w", w.URL, err)}
	}
	ts := strconv.FormatInt(n.d.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "alpd-approvals")
	req.Header.Set(HeaderWebhookID, id)
	req.Header.Set(HeaderWebhookTimestamp, ts)
	req.Header.Set(HeaderWebhookSignature, sign(w.Secret, id, ts, body))
	resp, err := n.d.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("webhook %s: %w", w.URL, err)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusGone:
		return finalError{fmt.Errorf("webhook %s answered 410 Gone: it wants no more notifications", w.URL)}
	}
	return fmt.Errorf("webhook %s answered %s: %s", w.URL, resp.Status, strings.TrimSpace(string(snippet)))
}

// Errors of VerifyWebhook.
var (
	ErrWebhookHeaders   = errors.New("notify: webhook headers missing or malformed")
	ErrWebhookTimestamp = errors.New("notify: webhook timestamp outside the tolerance")
	ErrWebhookSignature = errors.New("notify: no valid webhook signature")
)

// VerifyWebhook checks a received notification as a receiver should: the
// timestamp within tolerance of now (a replay window), and one of the
// space-separated "v1,<base64>" signatures equal to the HMAC-SHA256 of
// id.timestamp.body under secret.
func VerifyWebhook(secret []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	id, ts, sigs := h.Get(HeaderWebhookID), h.Get(HeaderWebhookTimestamp), h.Get(HeaderWebhookSignature)
	if id == "" || ts == "" || sigs == "" {
		return ErrWebhookHeaders
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: timestamp %q", ErrWebhookHeaders, ts)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %s off", ErrWebhookTimestamp, d)
	}
	want := []byte(sign(secret, id, ts, body))
	for s := range strings.FieldsSeq(sigs) {
		if hmac.Equal([]byte(s), want) {
			return nil
		}
	}
	return ErrWebhookSignature
}
