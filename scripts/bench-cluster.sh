#!/bin/sh
# Side-by-side load runs against a 3-node loopback cluster: single-check and
# batched calls, owner and cached mode, each with calls sent round-robin over
# the nodes and with calls sent to their keys' owner (loadgen --route owner),
# with the nodes' CPU time per call,
# after the same calls against the load generator's in-process baseline
# server (--baseline: gRPC alone, no limiter; the nodes' CPU is idle then).
# Used by `make bench-cluster`; figures recorded in docs/bench.md.
#
# Usage: scripts/bench-cluster.sh NODE_BINARY LOADGEN_BINARY
#
# Settings (environment): CALLS (single-check calls per run, default 60000),
# BATCH_CALLS (calls of 100 checks, default 3000), CONCURRENCY (default 32),
# NODE_GOMAXPROCS (GOMAXPROCS of each node; empty: scripts/cluster.sh's
# default, cores / 3 and at least 1; $(nproc) for Go's own default), ONLY (an
# extended regular expression: run only the runs whose label matches it, as
# for A/B runs of two node binaries, e.g. ONLY='owner mode, route').
# The cluster runs on the ports of scripts/cluster.sh for PORT_BASE (default
# 7100, those of `make run`): stop any `make run` there first, or pick
# another PORT_BASE. Only the processes started here are stopped.
set -eu

node=${1:-bin/ringlimit-node}
loadgen=${2:-bin/loadgen}
calls=${CALLS:-60000}
batch_calls=${BATCH_CALLS:-3000}
conc=${CONCURRENCY:-32}
run_dir=${RUN_DIR:-${TMPDIR:-/tmp}/ringlimit-bench}
base=${PORT_BASE:-7100}
export PORT_BASE=$base RINGLIMIT_ADDR=127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2)),127.0.0.1:$((base + 3)) # for cluster.sh and loadgen
tick=$(getconf CLK_TCK)

[ -x "$node" ] && [ -x "$loadgen" ] || { echo "bench-cluster.sh: build $node and $loadgen first" >&2; exit 2; }
for port in $((base + 1001)) $((base + 1002)) $((base + 1003)); do
	if curl -s -o /dev/null http://127.0.0.1:$port/healthz 2>/dev/null; then
		echo "bench-cluster.sh: something already serves 127.0.0.1:$port (make run?); stop it first" >&2
		exit 2
	fi
done

RUN_DIR=$run_dir ${NODE_GOMAXPROCS:+env GOMAXPROCS=$NODE_GOMAXPROCS} scripts/cluster.sh 3 "$node" >"$run_dir.out" 2>&1 &
cluster=$!
trap 'kill -TERM $cluster 2>/dev/null; wait $cluster 2>/dev/null || true' EXIT INT TERM

# Ready when every node's ring holds the three members (bounded wait).
i=0
until [ "$(curl -s http://127.0.0.1:$((base + 1003))/v1/cluster 2>/dev/null | grep -o '"name"' | wc -l)" -ge 3 ]; do
	i=$((i + 1))
	[ $i -le 100 ] || { echo "bench-cluster.sh: the cluster did not form; see $run_dir" >&2; exit 1; }
	sleep 0.1
done
# The nodes are the cluster script's children (it starts them in place),
# named like the binary (comm holds at most 15 bytes).
comm=$(basename "$node" | cut -c1-15)
node_pids=""
for p in $(pgrep -P "$cluster"); do
	[ "$(cat /proc/"$p"/comm 2>/dev/null)" = "$comm" ] && node_pids="$node_pids $p"
done
[ "$(echo $node_pids | wc -w)" -eq 3 ] || { echo "bench-cluster.sh: found node PIDs '$node_pids', want 3" >&2; exit 1; }
cpu_ticks() {
	t=0
	for p in $node_pids; do
		t=$((t + $(awk '{print $14 + $15}' /proc/"$p"/stat)))
	done
	echo $t
}

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), node GOMAXPROCS ${NODE_GOMAXPROCS:-cores/3}, node PIDs$node_pids"
run() { # label, calls, loadgen flags...
	label=$1 n=$2
	shift 2
	if [ -n "${ONLY:-}" ] && ! echo "$label" | grep -Eq -- "$ONLY"; then
		return 0
	fi
	before=$(cpu_ticks)
	out=$("$loadgen" --duration 60s --max-calls "$n" --concurrency "$conc" "$@")
	after=$(cpu_ticks)
	echo
	echo "== $label: loadgen --concurrency $conc --max-calls $n $*"
	echo "$out" | sed -n '2,8p'
	echo "nodes' CPU: $(((after - before) * 1000 / tick)) ms, $(((after - before) * 1000000 / tick / n)) us per call"
}
run "baseline: single check, in-process server that decides nothing" "$calls" --baseline --items 1
run "baseline: 100 checks per call, in-process server that decides nothing" "$batch_calls" --baseline --items 100
# Each workload round-robin, then owner-routed, back to back (A/B).
for route in round-robin owner; do
	run "single check, owner mode, route $route" "$calls" --items 1 --mode owner --route $route
done
for route in round-robin owner; do
	run "100 checks per call, owner mode, route $route" "$batch_calls" --items 100 --mode owner --route $route
done
for route in round-robin owner; do
	run "single check, owner mode, zipf keys, route $route" "$calls" --items 1 --mode owner --dist zipf --route $route
done
for route in round-robin owner; do
	run "single check, cached mode, route $route" "$calls" --items 1 --mode cached --route $route
done
