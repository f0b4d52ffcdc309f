# ringlimit — see README.md. Every target installs what it needs through the
# Go module proxy (and protoc through apt, for `make proto`).

GO        ?= go
PKGS      := ./...
N         ?= 3
BENCHTIME ?= 1s
# PORT_BASE: where the ports of make run and make cluster start (node i:
# gRPC PORT_BASE+i, HTTP PORT_BASE+1000+i, gossip PORT_BASE+845+i).
PORT_BASE ?= 7100

.PHONY: all build bins install test race lint bench bench-cluster bench-scale sim-scale proto fuzz soak run cluster sim sim-check e2e e2e-fenced flood conformance guava compare compare-short compare-test compare-build

all: lint test

## build: compile every package, and build the node as bin/ringlimit-node
## and the command-line client as bin/ringlimit.
build: bins
	$(GO) build $(PKGS)

## bins: bin/ringlimit-node (cmd/node), bin/ringlimit (cmd/ringlimit) and
## bin/portcheck (the port check of scripts/cluster.sh). go build -v names
## each package as it compiles it: on empty caches, a minute or two.
bins:
	@echo "building bin/ringlimit-node, bin/ringlimit and bin/portcheck (on empty Go caches the first build takes a minute or two; packages are listed as they compile)"
	$(GO) build -v -o bin/ringlimit-node ./cmd/node
	$(GO) build -v -o bin/ringlimit ./cmd/ringlimit
	$(GO) build -o bin/portcheck ./scripts/portcheck

## install: install the node as ringlimit-node and the client as ringlimit
## in $GOBIN (default: $GOPATH/bin). Not `go install ./cmd/node`: that
## names the node binary `node`, as Node.js is named.
install:
	@dir=$$($(GO) env GOBIN); [ -n "$$dir" ] || dir=$$($(GO) env GOPATH)/bin; \
	echo "installing ringlimit-node and ringlimit into $$dir"; \
	$(GO) build -v -o "$$dir/ringlimit-node" ./cmd/node && \
	$(GO) build -v -o "$$dir/ringlimit" ./cmd/ringlimit

## test: every unit, property and in-process multi-node test. One package
## at a time (-p 1): the root package's 30-node sidecar test needs the
## cores its gossip runs on, and the simulator's package, run beside it,
## took them (its gossip did not converge in 70 s; alone it takes 22 s).
test:
	$(GO) test -p 1 -count=1 -timeout 9m $(PKGS)

## race: the same tests under the race detector (CI runs it; the sim
## package takes longest: 18 minutes alone on the shared 2-core machine at
## load 13-20, docs/bench.md "The simulator's tests").
race:
	$(GO) test -race -count=1 -timeout 45m $(PKGS)

## lint: gofmt and go vet (the e2e-tagged tests too).
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) vet -tags e2e ./e2e/... ./deploy/
	$(GO) vet -tags 'e2e flood' ./e2e/
	$(GO) vet -tags 'e2e fenced' ./e2e/
	$(GO) vet -tags guava ./bucket/

## bench: decision benchmarks of every algorithm, side by side with x/time/rate.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./bucket/

## bench-cluster: a 3-node loopback cluster under cmd/loadgen, side by side:
## single-check and 100-check calls, owner and cached mode, with the nodes'
## CPU time per call (docs/bench.md). Uses the ports of `make run` (PORT_BASE).
bench-cluster: bins
	$(GO) build -o bin/loadgen ./cmd/loadgen
	@PORT_BASE=$(PORT_BASE) scripts/bench-cluster.sh bin/ringlimit-node bin/loadgen

## sim-scale: the cost of coordination against the number of nodes, in the
## simulator (docs/bench.md, "Scale"): messages and bytes per decision, CPU
## per request and accuracy at 5, 20, 50, 100 and 200 nodes (SCALE_NODES),
## then partition-half runs. Long (about 15 minutes on 2 cores).
sim-scale:
	$(GO) test ./sim -run '^$$' -bench 'BenchmarkScale$$' -benchtime 1x -timeout 60m
	SCALE_NODES=$${SCALE_NODES:-20,50,100} $(GO) test ./sim -run '^$$' -bench 'BenchmarkScalePartition$$' -benchtime 1x -timeout 60m

## bench-scale: cached-mode throughput of 3, 10 and 30 real nodes on
## loopback (SIZES), one bounded loadgen run each (docs/bench.md, "Scale").
bench-scale: bins
	$(GO) build -o bin/loadgen ./cmd/loadgen
	@PORT_BASE=$(PORT_BASE) scripts/bench-scale.sh bin/ringlimit-node bin/loadgen

## fuzz: run every fuzz target (each `func FuzzXxx` of a _test.go file) for
## FUZZTIME each, one after the other; the first failure stops the run.
## FUZZTIME is a duration (30s) or a count of inputs (50000x). CI uses a
## count: Go 1.26's fuzzing coordinator can fail a target with a bare
## "context deadline exceeded" when a duration ends while a starved worker
## is mid-input (no input is at fault; reported upstream as go.dev/issue/75804),
## and a count has no deadline to race.
## FUZZFLAGS adds flags, e.g. FUZZFLAGS=-parallel=1 on a shared machine.
FUZZTIME  ?= 30s
FUZZFLAGS ?=
fuzz:
	@set -e; n=0; \
	for f in $$(grep -rl --include='*_test.go' '^func Fuzz' . | sort); do \
	  for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
	    echo "== $$(dirname $$f) $$t"; n=$$((n + 1)); \
	    $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $(FUZZFLAGS) $$(dirname $$f); \
	  done; \
	done; \
	echo "fuzz: $$n targets passed, $(FUZZTIME) each"

## soak: 3 nodes on loopback under load over 100k keys for SOAK_SECONDS
## (default 600) after SOAK_WARMUP (default 60), sampling each node's
## goroutines and memory; reports the first and last sample, fails on errors
## or growth. Not in CI. Settings at the top of scripts/soak.sh.
soak: bins
	$(GO) build -o bin/loadgen ./cmd/loadgen
	@PORT_BASE=$(PORT_BASE) scripts/soak.sh bin/ringlimit-node bin/loadgen

## proto: regenerate the committed protobuf code (protoc from Debian's protobuf-compiler).
proto:
	@command -v protoc >/dev/null || (apt-get update -qq && apt-get install -y -qq protobuf-compiler)
	$(GO) build -o bin/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
	$(GO) build -o bin/protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc
	protoc --plugin=protoc-gen-go=bin/protoc-gen-go --plugin=protoc-gen-go-grpc=bin/protoc-gen-go-grpc \
	  -I proto --go_out=proto --go_opt=paths=source_relative \
	  --go-grpc_out=proto --go-grpc_opt=paths=source_relative \
	  $$(find proto -name '*.proto')

## guava: the differential test of bucket's SmoothBursty and SmoothWarmingUp
## against Guava 31.1's RateLimiter itself (docs/algorithms.md): Debian's
## libguava-java and JDK, installed when missing; the test compiles the oracle
## (bucket/testdata/guava) and compares GUAVA_SEQUENCES random sequences
## (default 10000; GUAVA_SEED, default 1) call by call. About 15 s here.
GUAVA_JAR ?= /usr/share/java/guava.jar
guava:
	@{ command -v javac >/dev/null && command -v java >/dev/null && [ -f $(GUAVA_JAR) ]; } || \
	  (apt-get update -qq && apt-get install -y -qq default-jdk-headless libguava-java)
	GUAVA_JAR=$(GUAVA_JAR) $(GO) test -tags guava -count=1 -v -run '^TestGuava' ./bucket/

## run: build the node and start a 3-node cluster on loopback (ports in
## scripts/cluster.sh and README.md; another set with PORT_BASE=17000);
## it refuses to start if one of its ports is taken. Ctrl-C stops every node.
run: N = 3
run: cluster

## cluster: the same with N nodes (1 to 50): make cluster N=5.
cluster: bins
	@PORT_BASE=$(PORT_BASE) scripts/cluster.sh $(N) bin/ringlimit-node

## sim: run every standard simulation scenario in every mode (seed 1, 60s
## simulated each) and print the comparison table. SIMFLAGS adds flags, e.g.
## SIMFLAGS='-flush 50ms,100ms,250ms -plot sim.svg' or SIMFLAGS='-format csv'.
SIMFLAGS ?=
sim:
	$(GO) run ./cmd/sim -scenario all -seed 1 $(SIMFLAGS)

## sim-check: the randomized fault checker (cmd/simcheck, sim/check.go):
## SIMCHECK_N seeded random fault schedules (default 1000) per mode:
## partitions, isolations, one-way cuts, flapping links, crashes, restarts,
## joins, graceful leaves and clock offsets within ±SIMCHECK_MAX_OFFSET
## (default the nodes' bound, --max-clock-offset 500ms; steps forward and
## back) on 3 to 7 nodes, silent or reporting networks,
## membership following the faults, the interleaving scheduler on. Every
## key over every span: owner and leased mode (fail-closed) within the
## token bucket's envelope, cached (local-share) within the envelope plus
## one allowance per fault, both plus the clock bound's documented effect.
## A failure prints its seed and a minimal
## schedule; exit 1 then. A progress bar on a terminal only. About 300
## CPU-seconds with today's failures shrunk (docs/accuracy.md, "The fault
## checker"). SIMCHECKFLAGS adds flags (-mode, -seed, -shrink; -reorder
## 10ms: every link delivers out of order, docs/consistency.md).
SIMCHECK_N          ?= 1000
SIMCHECK_MAX_OFFSET ?= 500ms
SIMCHECKFLAGS       ?=
sim-check:
	$(GO) run ./cmd/simcheck -n $(SIMCHECK_N) -max-offset $(SIMCHECK_MAX_OFFSET) $(SIMCHECKFLAGS)

## e2e: faults on real processes (docs/reliability.md): builds the node
## statically into the image ringlimit:e2e (FROM scratch, ./Dockerfile) and
## runs kill -9, a 30s network cut, a rolling restart with SIGTERM, a split
## and a clock offset on containers, under load; then Debian's nginx
## (installed if missing) in front of a cluster (e2e/nginx), and the compose
## file (Debian's docker-compose installed if no Compose is there) and the
## Kubernetes manifests' containers (deploy/) on the same image. Needs a reachable Docker
## daemon; about 9 minutes. E2EFLAGS adds flags to the fault scenarios' go
## test, e.g. E2EFLAGS='-run TestKill'.
E2EFLAGS ?=
e2e:
	@docker version --format '{{.Server.Version}}' >/dev/null 2>&1 || \
	  { echo "e2e: FAIL: the Docker daemon is unreachable (docker version); make e2e needs it" >&2; exit 1; }
	$(GO) test -tags e2e -count=1 -v -timeout 25m $(E2EFLAGS) ./e2e/
	@command -v nginx >/dev/null || (apt-get update -qq && apt-get install -y -qq nginx)
	$(GO) test -tags e2e -count=1 -v -timeout 5m ./e2e/nginx/
	@docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null || \
	  (apt-get update -qq && apt-get install -y -qq docker-compose)
	RINGLIMIT_IMAGE=ringlimit:e2e $(GO) test -tags e2e -count=1 -v -timeout 10m ./deploy/

## e2e-fenced: issue #15 item 3's promise on containers, under silent
## partitions (e2e/silent_test.go: iptables DROP inside the containers'
## network namespaces, entered with nsenter from the host): owner and
## leased mode, fail-closed, keep every key within the token bucket's
## envelope through a 3|2 split, an isolation, a one-way cut and a flapping
## link, and a healed cluster decides its keys again. Session 13, the CPUs
## loaded (load average 5 to 30 on 2 cores): the 3|2 split left the
## envelope in 2 of 16 runs (leased, +10.95 and +12.95: FenceHold's timing
## assumption, broken by load) until the fence hold waited for a majority's
## echoes too (sync/fence.go), and kept it in 51 runs of 51 since, the
## other scenarios in 3 of 3 (docs/reliability.md, "Open faults"). CI runs
## it after make e2e (.ci/run). Needs root (nsenter, iptables; it fails
## without them, and installs Debian's iptables and util-linux when
## missing); about 4 minutes.
e2e-fenced:
	@docker version --format '{{.Server.Version}}' >/dev/null 2>&1 || \
	  { echo "e2e-fenced: FAIL: the Docker daemon is unreachable (docker version)" >&2; exit 1; }
	@[ "$$(id -u)" = 0 ] || \
	  { echo "e2e-fenced: FAIL: not root; the silent partitions enter the containers' network namespaces (nsenter) and add iptables rules there" >&2; exit 1; }
	@{ command -v iptables >/dev/null && command -v nsenter >/dev/null; } || (apt-get update -qq && apt-get install -y -qq iptables util-linux)
	@{ command -v iptables >/dev/null && command -v nsenter >/dev/null; } || \
	  { echo "e2e-fenced: FAIL: iptables or nsenter still missing after apt-get install iptables util-linux" >&2; exit 1; }
	$(GO) test -tags 'e2e fenced' -count=1 -v -timeout 25m -run TestSilent ./e2e/

## flood: issue 16's key flood on containers (e2e/keyflood_test.go, build
## tags e2e and flood): TestKeyMemory fills one node with 1M keys and
## reports resident memory and heap per key (as shipped, the memory limit
## tuned from the keys, and GOGC=100 alone);
## TestKeyFlood sends 5M distinct keys through one node of three, each
## limited as deploy/k8s/sidecar.yaml limits its sidecar (256Mi, GOMEMLIMIT,
## the key budget), while a bystander checks its own keys on another node.
## Needs a reachable Docker daemon; about 10 minutes on 2 cores.
flood:
	@docker version --format '{{.Server.Version}}' >/dev/null 2>&1 || \
	  { echo "flood: FAIL: the Docker daemon is unreachable (docker version); make flood needs it" >&2; exit 1; }
	$(GO) test -tags 'e2e flood' -count=1 -v -timeout 30m -run 'TestKeyMemory|TestKeyFlood' ./e2e/

## conformance: ringlimit's Envoy service against Lyft's reference service
## (github.com/envoyproxy/ratelimit, in-process over Debian's redis-server,
## installed if missing): the same config files and ShouldRateLimit
## sequences to both, every response field compared with the golden results
## (docs/envoy.md#conformance-with-lyfts-service). A module of its own
## (conformance/), so the product's go.mod does not depend on Lyft's.
## CONFORMANCEFLAGS adds flags: -short (CI; about 3,100 requests instead of
## 7,400) or -update (rewrite the golden results after checking them).
CONFORMANCEFLAGS ?=
conformance:
	@command -v redis-server >/dev/null || (apt-get update -qq && apt-get install -y -qq redis-server)
	cd conformance && $(GO) vet ./... && $(GO) test -count=1 -timeout 5m -v -run TestConformance $(CONFORMANCEFLAGS) .

## compare: ringlimit beside Gubernator (v2.13.0) and Lyft's ratelimit
## service with Redis, and beside a baseline that answers the same gRPC APIs
## without deciding anything: 3 nodes of each (and 1-node RLS runs) on
## loopback ports chosen free, one system at a time, interleaved over
## rounds, driven by one load tool (compare/, a Go module of its own, so the
## product's go.mod gains nothing). Prints medians, ratios and load
## averages; writes compare.json. Installs Debian's redis-server when
## missing. About 20 minutes with the defaults (3 rounds of 10 s);
## COMPARE_FLAGS adds flags (-rounds, -duration, -only, -no-kill,
## -kill-only, ...).
## docs/bench.md ("Beside Gubernator and Lyft") and docs/comparison.md.
COMPARE_FLAGS ?=
NODE_PKG      := $(firstword $(wildcard cmd/ringlimit-node cmd/node))
compare: compare-build
	cd compare && bin/compare -ringlimit-version "$$(git describe --always --dirty 2>/dev/null || echo unknown)" \
	  -out ../compare.json $(COMPARE_FLAGS)

## compare-short: the same, 1 round of 2 s runs, owner kills bounded at 5 s.
compare-short: COMPARE_FLAGS = -rounds 1 -duration 2s -kill-wait 5s
compare-short: compare

## compare-test: the compare module's own tests (its load tool, baseline
## and report), and vet.
compare-test:
	cd compare && $(GO) vet ./... && $(GO) test -count=1 ./...

# Lyft's service is built by go install at a version, so with the
# dependencies of its own go.mod. Gubernator's daemon runs in processes of
# compare itself (compare/gubernatord.go says why), at the version
# compare/go.mod requires.
LYFT_VERSION ?= v1.4.1-0.20260122083618-3fb702589d36
compare-build:
	@command -v redis-server >/dev/null || (apt-get update -qq && apt-get install -y -qq redis-server)
	$(GO) build -o compare/bin/ringlimit-node ./$(NODE_PKG)
	cd compare && $(GO) build -o bin/compare .
	GOBIN=$(CURDIR)/compare/bin $(GO) install github.com/envoyproxy/ratelimit/src/service_cmd@$(LYFT_VERSION)
	mv compare/bin/service_cmd compare/bin/ratelimit
