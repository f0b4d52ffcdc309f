# ringlimit — see README.md. Every target installs what it needs through the
# Go module proxy (and protoc through apt, for `make proto`).

GO        ?= go
PKGS      := ./...
N         ?= 3
BENCHTIME ?= 1s

.PHONY: all build test lint bench proto fuzz run cluster sim

all: lint test

## build: compile every package and command.
build:
	$(GO) build $(PKGS)

## test: every unit, property and in-process multi-node test.
test:
	$(GO) test -count=1 -timeout 9m $(PKGS)

## lint: gofmt and go vet.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

## bench: decision benchmarks of every algorithm, side by side with x/time/rate.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./bucket/

## fuzz: run every fuzz target for FUZZTIME each.
FUZZTIME ?= 30s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

## proto: regenerate the committed protobuf code (protoc from Debian's protobuf-compiler).
proto:
	@command -v protoc >/dev/null || (apt-get update -qq && apt-get install -y -qq protobuf-compiler)
	$(GO) build -o bin/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
	$(GO) build -o bin/protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc
	protoc --plugin=protoc-gen-go=bin/protoc-gen-go --plugin=protoc-gen-go-grpc=bin/protoc-gen-go-grpc \
	  -I proto --go_out=proto --go_opt=paths=source_relative \
	  --go-grpc_out=proto --go-grpc_opt=paths=source_relative \
	  $$(find proto -name '*.proto')

## run: build the node and start a 3-node cluster on loopback (ports in
## scripts/cluster.sh and README.md); Ctrl-C stops every node.
run: N = 3
run: cluster

## cluster: the same with N nodes (1 to 50): make cluster N=5.
cluster:
	$(GO) build -o bin/node ./cmd/node
	@scripts/cluster.sh $(N) bin/node

## sim: run every standard simulation scenario in every mode (seed 1, 60s
## simulated each) and print the comparison table. SIMFLAGS adds flags, e.g.
## SIMFLAGS='-flush 50ms,100ms,250ms -plot sim.svg' or SIMFLAGS='-format csv'.
SIMFLAGS ?=
sim:
	$(GO) run ./cmd/sim -scenario all -seed 1 $(SIMFLAGS)
