package federation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	ledgerv1 "github.com/alpd-project/alpd/gen/alp/ledger/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alpwire"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/streams"
)

// Cosigning, witness style (docs/federation.md, "Cosigning"; C2SP
// tlog-witness add-checkpoint in alp-wire form). After an exchange between a
// person here and one at another broker, this broker asks the other's home
// broker to witness the person's log: an outbox item (kind COSIGN) takes the
// log's latest checkpoint and the consistency proof from the size the
// witness holds, POSTs the signed CosignRequest to <federation_url>/cosign,
// verifies the cosignature it gets back with the witness domain's published
// ledger keys and records it in the person's log (checkpoint.cosigned). A
// witness holding another size answers 409 with that size, and the request
// goes again with the proof from there. The other broker does the same for
// its person's log, so each log is witnessed by the other side: neither
// operator can show a rewritten history without the other's signature
// contradicting it.

// CosignPath is the witness's end of the exchange.
const CosignPath = alpwire.FederationPath + "/cosign"

// witnessRounds bounds the size corrections of one cosigning: the size the
// witness holds changes only when another request of the same log got in
// first.
const witnessRounds = 3

// queueCosign puts a cosigning of the person's log by the witness domain's
// broker in the outbox, once per envelope (minSize: entries the checkpoint
// must cover). It never holds up what queued it: a cosigning that cannot be
// queued is logged and skipped, and the next exchange's covers the log as
// it then stands.
func (s *Service) queueCosign(ctx context.Context, cause *alpv1.Event, tenant, person, witness, envelopeID string, minSize uint64) {
	subject, err := streams.OutboxSubject(tenant, witness, streams.OutboxCosign, envelopeID)
	if err == nil {
		ev := s.NewEvent("outbox_item", tenant, cause, envelopeID, nil)
		ev.Header.EventId = bus.HashID("outbox_cosign", tenant, person, witness, envelopeID)
		ev.Body = &alpv1.Event_OutboxItem{OutboxItem: &alpv1.OutboxItem{
			Kind: alpv1.OutboxKind_OUTBOX_KIND_COSIGN, Envelope: &alpv1.Envelope{Id: envelopeID}, LogPersonId: person,
			RemoteDomain: witness, MinSize: minSize, Queued: timestamppb.Now(),
		}}
		_, err = s.Bus.Publish(context.WithoutCancel(ctx), subject, ev)
	}
	if err != nil {
		s.Logger.Warn("federation: a cosigning could not be queued", "tenant", tenant, "witness", witness, "envelope_id", envelopeID, "err", err)
	}
}

// sendCosign has the item's person's log cosigned by the witness domain's
// home broker and records the cosignature.
func (s *Service) sendCosign(ctx context.Context, tenant string, item *alpv1.OutboxItem) error {
	witness, person := item.GetRemoteDomain(), item.GetLogPersonId()
	origin := ledgerlog.Origin(tenant, person)
	if origin == "" {
		return bus.Permanent(fmt.Errorf("a cosigning of no log (%q, %q)", tenant, person))
	}
	home, keys, err := s.remoteBroker(ctx, witness)
	if err != nil {
		return err
	}
	cosigners, err := cosignerKeys(keys, witness)
	if err != nil {
		return &remoteError{message: err.Error()}
	}
	conn, err := s.peer(alpv1.Role_ROLE_LEDGER)
	if err != nil {
		return bus.Later(time.Second, err)
	}
	lc := ledgerv1.NewLedgerServiceClient(conn)
	key, err := s.brokerKey(ctx)
	if err != nil {
		return err
	}
	held := home.Broker + " " + witness + " " + origin
	old, _ := s.witnessed.Load(held)
	oldSize, _ := old.(uint64)
	for range witnessRounds {
		wp, err := lc.WitnessProof(ctx, &ledgerv1.WitnessProofRequest{Tenant: tenant, PersonId: person, OldSize: oldSize, MinSize: item.GetMinSize()})
		switch status.Code(err) {
		case codes.OK:
		case codes.NotFound, codes.Unavailable:
			return bus.Later(500*time.Millisecond, err)
		case codes.FailedPrecondition:
			// The witness holds more of the log than it signed: evidence.
			s.Logger.Error("federation: a witness holds a larger checkpoint of a log than the log signed", "origin", origin,
				"witness", witness, "held", oldSize, "err", err)
			return bus.Permanent(err)
		default:
			return fmt.Errorf("federation: the checkpoint to cosign: %w", err)
		}
		note := wp.GetCheckpoint().GetNote()
		cp, err := ledgerlog.CheckpointText(note)
		if err != nil {
			return bus.Permanent(fmt.Errorf("the ledger's checkpoint of %s: %w", origin, err))
		}
		raw, err := alpwire.SignCosignRequest(&alpwire.CosignRequest{Origin: s.opts.BrokerName, Witness: witness, Log: origin,
			OldSize: int64(oldSize), ConsistencyProof: alpwire.EncodeProof(wp.GetConsistencyProof()), Checkpoint: string(note),
			RequestedTS: time.Now().UnixMilli()}, key.keyID, key.signer)
		if err != nil {
			return bus.Permanent(fmt.Errorf("signing the cosign request: %w", err))
		}
		answer, err := s.post(ctx, keys.FederationURL+"/cosign", home.Broker, raw, key)
		var re *remoteError
		if errors.As(err, &re) && re.status == http.StatusConflict && re.code == alpwire.CodeWitnessSizeMismatch {
			n, perr := strconv.ParseUint(re.header.Get(alpwire.HeaderWitnessSize), 10, 64)
			if perr != nil || n == oldSize {
				return &remoteError{message: "the witness's size mismatch names no other size: " + re.message}
			}
			oldSize = n
			s.witnessed.Store(held, n)
			continue
		}
		if err != nil {
			if errors.As(err, &re) && re.code == alpwire.CodeSplitView {
				s.Logger.Error("federation: a witness refused a checkpoint as a split view", "origin", origin, "witness", witness, "size", cp.Size, "err", err)
			}
			return err
		}
		line, err := verifyCosigned(answer, witness, cp, cosigners)
		if err != nil {
			// An answer we cannot check proves nothing: ask again.
			return &remoteError{message: "unverifiable cosignature: " + err.Error()}
		}
		s.witnessed.Store(held, cp.Size)
		_, err = lc.RecordCosignature(ctx, &ledgerv1.RecordCosignatureRequest{Tenant: tenant, PersonId: person, Checkpoint: note, Cosignature: line})
		switch status.Code(err) {
		case codes.OK:
			s.m.cosigned.WithLabelValues("log").Inc()
			return nil
		case codes.Unavailable:
			return bus.Later(500*time.Millisecond, err)
		case codes.InvalidArgument:
			return bus.Permanent(err)
		}
		return fmt.Errorf("federation: recording the cosignature: %w", err)
	}
	return &remoteError{message: "the witness's size changed in every round"}
}

// verifyCosigned checks the witness's answer: for this checkpoint, and a
// cosignature by one of the witness domain's published keys. It returns the
// signature line.
func verifyCosigned(answer []byte, witness string, cp ledgerlog.Checkpoint, cosigners []string) (string, error) {
	c, err := alpwire.ParseCosigned(answer)
	if err != nil {
		return "", err
	}
	if c.Witness != witness || c.Log != cp.Origin || uint64(c.Size) != cp.Size {
		return "", fmt.Errorf("the answer is about %s of size %d by %s, not %s", c.Log, c.Size, c.Witness, cp)
	}
	if _, err := ledgerlog.VerifyCosignature(c.Cosignature, cp, cosigners...); err != nil {
		return "", err
	}
	return c.Cosignature, nil
}

// cosignerKeys are the witness keys of a domain: its published ledger keys
// under the witness key name (ledgerlog.CosignerKeyOf).
func cosignerKeys(bk *alpwire.BrokerKeys, domain string) ([]string, error) {
	var out []string
	for _, k := range bk.LedgerKeys[domain] {
		c, err := ledgerlog.CosignerKeyOf(k)
		if err != nil {
			return nil, fmt.Errorf("federation: a ledger key of %s: %w", domain, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("federation: %s publishes no ledger keys", domain)
	}
	return out, nil
}

// handleCosign is POST /federation/v1/cosign: the home broker of a log's
// domain asks this broker to witness a checkpoint of it, as one of the
// domains hosted here. The request and the object are signed by that home
// broker, the checkpoint by its published ledger keys; the ledger cosigns
// only a checkpoint consistent with the last one this domain cosigned of the
// log.
func (s *Service) handleCosign(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		httpjson.WriteError(w, httpjson.Errorf(http.StatusBadRequest, "unreadable_body", "the request body could not be read"))
		return
	}
	answer, held, e := s.witness(r.Context(), r, raw, time.Now())
	if e != nil {
		s.m.refused.WithLabelValues(e.Code).Inc()
		s.Logger.Warn("federation: cosign request refused", "code", e.Code, "message", e.Message, "cause", e.Cause)
		if held != "" {
			w.Header().Set(alpwire.HeaderWitnessSize, held)
		}
		httpjson.WriteError(w, e)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	httpjson.NoStore(w.Header())
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(answer)
}

// witness runs the witness's checks and cosigns. A size mismatch comes back
// with held, the size the witness holds.
func (s *Service) witness(ctx context.Context, r *http.Request, raw []byte, now time.Time) (answer []byte, held string, _ *httpjson.Error) {
	unavailable := func(what string, retry int, err error) *httpjson.Error {
		return &httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, RetryAfter: retry, Message: what, Cause: err}
	}
	auth, err := alpwire.ParseAuthorization(r.Header.Get("Authorization"))
	if err != nil {
		return nil, "", fromWire(err, true).Error
	}
	if auth.Destination != s.opts.BrokerName {
		return nil, "", httpjson.Errorf(http.StatusUnauthorized, alpwire.CodeWrongDestination, "the request is for %s, this broker is %s", auth.Destination, s.opts.BrokerName)
	}
	req, err := alpwire.ParseCosignRequest(raw)
	if err != nil {
		return nil, "", fromWire(err, false).Error
	}
	if !s.Tenants.Hosts(req.Witness) {
		return nil, "", httpjson.Errorf(http.StatusNotFound, CodeUnknownDestination, "this broker does not host %s", req.Witness)
	}
	if auth.Origin != req.Origin {
		return nil, "", httpjson.Errorf(http.StatusUnauthorized, CodeOriginMismatch, "the request comes from %s, the cosign request from %s", auth.Origin, req.Origin)
	}
	if !s.nonces.add(auth.Origin, auth.Nonce, now) {
		return nil, "", httpjson.Errorf(http.StatusUnauthorized, CodeReplay, "this request was received before")
	}
	logDomain, _, err := ledgerlog.ParseOrigin(req.Log)
	if err != nil {
		return nil, "", httpjson.Errorf(http.StatusBadRequest, alpwire.CodeInvalidValue, "log: %v", err)
	}
	home, err := s.resolver.HomeBroker(ctx, logDomain)
	if err != nil {
		return nil, "", httpjson.Errorf(http.StatusUnauthorized, CodeDiscoveryFailed, "the home broker of %s could not be found", logDomain)
	}
	if home.Broker != auth.Origin {
		return nil, "", httpjson.Errorf(http.StatusForbidden, CodeSignerNotHomeBroker, "%s's home broker is %s, not %s", logDomain, home.Broker, auth.Origin)
	}
	keys := s.resolver.KeyResolver(ctx, home.BrokerURL)
	if _, err := alpwire.VerifyRequest(r, raw, s.opts.BrokerName, keys, now, s.opts.Skew); err != nil {
		return nil, "", fromWire(err, true).Error
	}
	if err := alpwire.VerifySigned(raw, alpwire.CtxCosign, auth.Origin, keys, now); err != nil {
		return nil, "", fromWire(err, true).Error
	}
	bk, err := s.resolver.BrokerKeys(ctx, home.BrokerURL, home.Broker)
	if err != nil {
		return nil, "", unavailable("the log's broker's keys cannot be fetched right now", 5, err)
	}
	conn, err := s.peer(alpv1.Role_ROLE_LEDGER)
	if err != nil {
		return nil, "", unavailable("the ledger cannot be reached right now", 1, err)
	}
	var trailer metadata.MD
	res, err := ledgerv1.NewLedgerServiceClient(conn).Cosign(ctx, &ledgerv1.CosignRequest{Tenant: req.Witness, Checkpoint: []byte(req.Checkpoint),
		LogKeys: bk.LedgerKeys[logDomain], OldSize: uint64(req.OldSize), ConsistencyProof: req.ProofHashes()}, grpc.Trailer(&trailer))
	if err != nil {
		code := ""
		if v := trailer.Get("alp-error-code"); len(v) > 0 {
			code = v[0]
		}
		msg := status.Convert(err).Message()
		msg = strings.TrimPrefix(msg, code+": ")
		switch {
		case code == alpwire.CodeWitnessSizeMismatch:
			size := trailer.Get("alp-witness-size")
			if len(size) == 0 {
				return nil, "", unavailable("the witness's size cannot be read right now", 1, err)
			}
			return nil, size[0], httpjson.Errorf(http.StatusConflict, code, "%s", msg)
		case code == alpwire.CodeSplitView:
			s.Logger.Error("federation: refused to cosign a split view", "log", req.Log, "witness", req.Witness, "origin", auth.Origin, "err", err)
			return nil, "", httpjson.Errorf(http.StatusConflict, code, "%s", msg)
		case code == "invalid_checkpoint":
			return nil, "", httpjson.Errorf(http.StatusForbidden, code, "the checkpoint is not signed by a ledger key %s publishes for %s: %s", home.Broker, logDomain, msg)
		case status.Code(err) == codes.InvalidArgument:
			return nil, "", httpjson.Errorf(http.StatusBadRequest, alpwire.CodeInvalidValue, "%s", msg)
		case status.Code(err) == codes.NotFound:
			return nil, "", httpjson.Errorf(http.StatusNotFound, CodeUnknownDestination, "this broker does not keep a ledger of %s", req.Witness)
		}
		return nil, "", unavailable("the checkpoint cannot be cosigned right now", 1, err)
	}
	cp, err := ledgerlog.CheckpointText([]byte(req.Checkpoint))
	if err != nil {
		return nil, "", unavailable("the checkpoint cannot be read", 1, err)
	}
	out, err := alpwire.MarshalCosigned(&alpwire.Cosigned{Witness: req.Witness, Log: req.Log, Size: int64(cp.Size), Cosignature: res.GetCosignature()})
	if err != nil {
		return nil, "", unavailable("the cosignature cannot be answered", 1, err)
	}
	s.m.cosigned.WithLabelValues("witness").Inc()
	return out, "", nil
}
