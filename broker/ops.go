package broker

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/httpjson"
)

// Operator is a person allowed to run operator diagnostics (trace). Only
// the SHA-256 of the token is configured; the token itself is shown once
// by `alpctl operator-token`.
type Operator struct {
	Name string
	// TokenSHA256 is the lowercase hex SHA-256 of the operator's token.
	TokenSHA256 string
}

// OperatorTokenPrefix starts every operator token, so secret scanners and
// people can recognise one.
const OperatorTokenPrefix = "alpop_"

// NewOperatorToken returns a fresh operator token and the hash to configure.
func NewOperatorToken() (token, sha string) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	token = OperatorTokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	return token, HashOperatorToken(token)
}

// HashOperatorToken is the configured form of a token.
func HashOperatorToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// OpsLimits rate-limit operator endpoints per operator.
type OpsLimits struct {
	// Rate is requests per second per operator (default 1) with Burst
	// (default 5).
	Rate  rate.Limit
	Burst int
}

// opsAuth authenticates operators and rate-limits them.
type opsAuth struct {
	operators []Operator
	limits    OpsLimits
	mu        sync.Mutex
	limiters  map[string]*rate.Limiter
	// failures slows down guessing: unauthenticated requests share one
	// limiter, so a flood of bad tokens cannot cost us much.
	failures *rate.Limiter
}

func newOpsAuth(ops []Operator, l OpsLimits) *opsAuth {
	if l.Rate == 0 {
		l.Rate = 1
	}
	if l.Burst == 0 {
		l.Burst = 5
	}
	return &opsAuth{operators: ops, limits: l, limiters: map[string]*rate.Limiter{}, failures: rate.NewLimiter(10, 20)}
}

func validOperators(ops []Operator) error {
	for i, op := range ops {
		if op.Name == "" {
			return fmt.Errorf("broker: operator %d has no name", i)
		}
		if b, err := hex.DecodeString(op.TokenSHA256); err != nil || len(b) != sha256.Size {
			return fmt.Errorf("broker: operator %q: token_sha256 must be 64 hex digits", op.Name)
		}
	}
	return nil
}

// wrap admits only authenticated operators within their rate.
func (a *opsAuth) wrap(next func(w http.ResponseWriter, r *http.Request, operator string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, ok := a.admit(w, r, "an operator token is required (Authorization: Bearer alpop_…)")
		if !ok {
			return
		}
		a.mu.Lock()
		lim, ok := a.limiters[name]
		if !ok {
			lim = rate.NewLimiter(a.limits.Rate, a.limits.Burst)
			a.limiters[name] = lim
		}
		a.mu.Unlock()
		if !allow(w, lim) {
			return
		}
		next(w, r, name)
	}
}

// admit returns the operator r authenticates as. Otherwise it answers 401
// with refusal as the message (or 429 when bad tokens come faster than the
// shared failure limit) and returns false.
func (a *opsAuth) admit(w http.ResponseWriter, r *http.Request, refusal string) (string, bool) {
	name, ok := a.authenticate(r)
	if ok {
		return name, true
	}
	if allow(w, a.failures) {
		httpjson.WriteError(w, &httpjson.Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: refusal,
			Challenge: `Bearer realm="alpd-operator"`})
	}
	return "", false
}

func (a *opsAuth) authenticate(r *http.Request) (string, bool) {
	// The scheme is case-insensitive (RFC 9110 §11.1): one parser for
	// every bearer credential.
	token, ok := accesstoken.BearerToken(r.Header.Get("Authorization"))
	if !ok || !strings.HasPrefix(token, OperatorTokenPrefix) {
		return "", false
	}
	got := HashOperatorToken(token)
	name, found := "", false
	for _, op := range a.operators {
		// Compare every configured hash in constant time.
		if subtle.ConstantTimeCompare([]byte(got), []byte(strings.ToLower(op.TokenSHA256))) == 1 {
			name, found = op.Name, true
		}
	}
	return name, found
}

// allow answers 429 with Retry-After when lim has no token now.
func allow(w http.ResponseWriter, lim *rate.Limiter) bool {
	res := lim.Reserve()
	d := res.Delay()
	if res.OK() && d == 0 {
		return true
	}
	res.Cancel()
	secs := int(math.Ceil(d.Seconds()))
	if !res.OK() || secs < 1 {
		secs = 1
	}
	httpjson.WriteError(w, &httpjson.Error{Status: http.StatusTooManyRequests, Code: "rate_limited",
		Message: "too many requests; retry later", RetryAfter: secs})
	return false
}

// TraceResult is the answer of POST /v1/ops/trace.
type TraceResult struct {
	Trace []Hop `json:"trace"`
	// Ready is true when every hop answered ready.
	Ready bool `json:"ready"`
}

func (b *Broker) traceHandler(w http.ResponseWriter, r *http.Request, operator string) {
	via := r.URL.Query().Get("via")
	if via == "" {
		via = ViaAuto
	}
	if via != ViaAuto && via != ViaGRPC && via != ViaBus {
		httpjson.WriteError(w, httpjson.Errorf(http.StatusBadRequest, "bad_via", "via must be auto, grpc or bus"))
		return
	}
	select {
	case <-b.started:
	default:
		httpjson.WriteError(w, httpjson.Errorf(http.StatusServiceUnavailable, "starting", "the broker is still starting"))
		return
	}
	start := time.Now()
	hops, err := b.Trace(r.Context(), via)
	if err != nil {
		httpjson.WriteError(w, &httpjson.Error{Status: http.StatusInternalServerError, Code: "trace_failed", Message: err.Error()})
		return
	}
	res := TraceResult{Trace: hops, Ready: true}
	for _, h := range hops {
		res.Ready = res.Ready && h.Ready
	}
	b.log.Info("operator trace", "operator", operator, "via", via, "ready", res.Ready, "took", time.Since(start).String())
	httpjson.Write(w, http.StatusOK, res)
}
