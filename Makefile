# alpd — everything a fresh machine with Go needs goes through these targets.
# Tools are pinned in tools/go.mod and tools/buf/go.mod and built into ./bin
# from the Go module proxy only.

export GOTOOLCHAIN := local
GO      ?= go
BIN     := $(CURDIR)/bin
BUF     := $(BIN)/buf
PKGS    := ./...

.PHONY: all build tools clients browser proto proto-check lint test test-short fuzz bench demo clean

all: build

build:
	$(GO) build -o $(BIN)/alpd ./cmd/alpd
	$(GO) build -o $(BIN)/alpctl ./cmd/alpctl

$(BUF): tools/buf/go.mod tools/buf/go.sum
	cd tools/buf && $(GO) build -o $(BUF) github.com/bufbuild/buf/cmd/buf

$(BIN)/staticcheck: tools/go.mod tools/go.sum
	$(GO) build -modfile=tools/go.mod -o $@ honnef.co/go/tools/cmd/staticcheck

tools: $(BUF) $(BIN)/staticcheck

# The real clients the end-to-end tests run (the MCP TypeScript SDK and the
# MCP conformance suite, test/clients): installed from the npm registry as
# the lockfile pins them, into the git-ignored test/clients/node_modules;
# npm ci runs again only when the package files change.
CLIENTS := test/clients
$(CLIENTS)/node_modules/.installed: $(CLIENTS)/package.json $(CLIENTS)/package-lock.json
	cd $(CLIENTS) && npm ci --no-audit --no-fund --ignore-scripts
	touch $@

clients: $(CLIENTS)/node_modules/.installed

# Debian's Chromium, which the approvals pages' end-to-end test drives
# (test/e2e/approvals_browser_test.go, through chromedp): installed once
# from the Debian archive (root, or through sudo), skipped when present.
CHROMIUM ?= /usr/bin/chromium
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
$(CHROMIUM):
	$(SUDO) apt-get update -q
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends chromium

browser: $(CHROMIUM)

# Regenerate the committed protobuf code.
proto: $(BUF)
	$(BUF) format -w
	$(BUF) lint
	rm -rf gen
	$(BUF) generate

# Lint the protos and check that no field was broken against the last commit.
proto-check: $(BUF)
	$(BUF) lint
	$(BUF) format --exit-code >/dev/null
	@if git rev-parse --verify -q HEAD~1 >/dev/null; then \
		$(BUF) breaking --against '.git#ref=HEAD~1'; \
	else echo "buf breaking: no previous commit to compare with"; fi

lint: $(BIN)/staticcheck
	$(GO) vet $(PKGS)
	$(BIN)/staticcheck $(PKGS)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }

# All tests: lint, proto checks, the generated-code drift test, unit,
# integration and end-to-end tests (they build alpd and nats-server, and
# run the real clients and Chromium: ALPD_REQUIRE_CLIENTS and
# ALPD_REQUIRE_BROWSER make a missing one a failure).
test: tools lint proto-check clients browser
	ALPD_REQUIRE_CLIENTS=1 ALPD_REQUIRE_BROWSER=1 ALPD_CHROMIUM=$(CHROMIUM) ALPD_BUF=$(BUF) $(GO) test -race -count=1 -timeout 20m $(PKGS)
	$(MAKE) fuzz

# Bounded fuzzing of the decoders agents reach (seeded with the samples in
# testdata); -fuzzminimizetime keeps a found crasher's minimisation short.
FUZZ = $(GO) test -run '^$$' -fuzztime 10s -fuzzminimizetime 5s
fuzz:
	$(FUZZ) -fuzz '^FuzzDecodeJSON$$' ./internal/nlip/
	$(FUZZ) -fuzz '^FuzzDecodeCBOR$$' ./internal/nlip/
	$(FUZZ) -fuzz '^FuzzParseAgentHeader$$' ./internal/nmp/
	$(FUZZ) -fuzz '^FuzzCacheControl$$' ./services/federation/discovery/
	$(FUZZ) -fuzz '^FuzzRequestHost$$' ./services/federation/discovery/
	$(FUZZ) -fuzz '^FuzzParseEnvelope$$' ./internal/alpwire/
	$(FUZZ) -fuzz '^FuzzParseAuthorization$$' ./internal/alpwire/
	$(FUZZ) -fuzz '^FuzzParseBrokerKeys$$' ./internal/alpwire/
	$(FUZZ) -fuzz '^FuzzParseDomainDoc$$' ./internal/alpwire/
	$(FUZZ) -fuzz '^FuzzParseCosignRequest$$' ./internal/alpwire/
	$(FUZZ) -fuzz '^FuzzParseCosigned$$' ./internal/alpwire/

test-short:
	$(GO) test -short -count=1 $(PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2000x ./internal/bus/ ./services/identity/
	$(GO) test -run '^$$' -bench . ./internal/accesstoken/
	$(GO) test -run '^$$' -bench 'DecodeValidate|StdlibMapDecode' -benchmem ./internal/nlip/
	$(GO) test -run '^$$' -bench 'AuthenticatedSend|LoopbackEcho' -benchtime 3s ./services/ingress/nlipapi/
	$(GO) test -run '^$$' -bench 'MCPSend|MCPLoopbackEcho' -benchtime 3s ./services/ingress/mcpapi/
	$(GO) test -run '^$$' -bench 'AppendOnePerson' -benchtime 5000x ./services/ledger/storage/jsstore/
	$(GO) test -run '^$$' -bench 'Proofs' -benchtime 20000x ./internal/ledgerlog/
	$(GO) test -run '^$$' -bench 'Validate30|Fields30|Check30' -benchmem ./internal/msgtypes/
	$(GO) test -run '^$$' -bench 'DecideMessage30|AuthorizeOnce' -benchmem ./services/policy/rules/
	$(GO) test -run '^$$' -bench 'Decide30|DecideRatio30' -benchmem ./services/policy/decision/
	$(GO) test -run '^$$' -bench 'SignEnvelope|VerifyEnvelope|Ed25519' -benchmem ./internal/alpwire/
	$(GO) test -run '^$$' -bench 'Current|CompileEachRead' -benchtime 2000x ./services/policy/rulestore/
	$(GO) test -run '^$$' -bench 'Floor|Scan280' -benchmem ./services/policy/dlp/
	# The governed send against the real binary, beside a loopback echo:
	# every write fsynced (the default), then fsynced together each second.
	ALPD_LOAD=1 $(GO) test -count=1 -run '^TestGovernedSendLatency$$' -v ./test/e2e/
	ALPD_LOAD=1 ALPD_LOAD_SYNC_INTERVAL=1s $(GO) test -count=1 -run '^TestGovernedSendLatency$$' -v ./test/e2e/
	# Delivery against the real binary, beside a loopback echo: a send until
	# the recipient's WebSocket push or MCP read (p50/p99 at light load) and
	# items per second with 64 agents, over NLIP and over MCP.
	ALPD_LOAD=1 $(GO) test -count=1 -run '^TestDeliveryLoad' -v ./test/e2e/
	# Federation against two real brokers over HTTPS, beside the same-broker
	# path and a loopback HTTPS echo: items per second and p50/p99 of a send
	# until the recipient's WebSocket push, with 64 agents.
	ALPD_LOAD=1 $(GO) test -count=1 -run '^TestFederationLoad' -v ./test/federation/
	# Policy's throughput in split mode with one and two worker processes.
	ALPD_LOAD=1 $(GO) test -count=1 -run '^TestPolicyThroughput$$' -v ./test/e2e/

# The demo: start alpd all-in-one on the embedded NATS, show it healthy with
# its streams, stop it.
demo: build
	./scripts/demo.sh

clean:
	rm -rf $(BIN)
