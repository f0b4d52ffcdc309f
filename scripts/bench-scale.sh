#!/bin/sh
# Cached-mode throughput against the number of real nodes on loopback
# (docs/bench.md, "Scale"): for each size in SIZES, start a cluster with
# scripts/cluster.sh (GOMAXPROCS=1 per node), wait until every node's ring
# holds every member, drive it with one bounded loadgen run (single-check
# calls, cached mode, concurrency 32, round-robin over every node, 10,000
# uniform keys of 1000/s), print the calls per second, the latency
# percentiles and the nodes' CPU time per call, and stop the cluster.
#
# Usage: scripts/bench-scale.sh NODE_BINARY LOADGEN_BINARY
#
# Settings (environment): SIZES (default "3 10 30"), CALLS (most calls per
# run, default 20000), DURATION (longest run, default 20s), PORT_BASE (the
# ports of scripts/cluster.sh, default 7100). Every run is bounded in calls
# and time; only the processes started here are stopped, by their PIDs.
set -eu

node=${1:-bin/ringlimit-node}
loadgen=${2:-bin/loadgen}
sizes=${SIZES:-3 10 30}
calls=${CALLS:-20000}
duration=${DURATION:-20s}
base=${PORT_BASE:-7100}
tick=$(getconf CLK_TCK)
[ -x "$node" ] && [ -x "$loadgen" ] || { echo "bench-scale.sh: build $node and $loadgen first" >&2; exit 2; }

cluster=""
stop() {
	if [ -n "$cluster" ]; then
		kill -TERM "$cluster" 2>/dev/null || true
		wait "$cluster" 2>/dev/null || true
		cluster=""
	fi
}
trap stop EXIT INT TERM

for n in $sizes; do
	run_dir=$(mktemp -d "${TMPDIR:-/tmp}/ringlimit-scale-$n-XXXXXX")
	RUN_DIR=$run_dir GOMAXPROCS=1 PORT_BASE=$base scripts/cluster.sh "$n" "$node" >"$run_dir/cluster.out" 2>&1 &
	cluster=$!
	targets=""
	for i in $(seq 1 "$n"); do
		targets="$targets${targets:+,}127.0.0.1:$((base + i))"
	done
	# Formed when every node's ring holds n members (bounded wait: 60 s).
	i=0
	for j in $(seq 1 "$n"); do
		until [ "$(curl -s http://127.0.0.1:$((base + 1000 + j))/v1/cluster 2>/dev/null | grep -o '"name"' | wc -l)" -ge "$n" ]; do
			i=$((i + 1))
			[ $i -le 600 ] || { echo "bench-scale.sh: the $n-node cluster did not form; see $run_dir" >&2; exit 1; }
			sleep 0.1
		done
	done
	comm=$(basename "$node" | cut -c1-15)
	pids=""
	for p in $(pgrep -P "$cluster"); do
		[ "$(cat /proc/"$p"/comm 2>/dev/null)" = "$comm" ] && pids="$pids $p"
	done
	[ "$(echo $pids | wc -w)" -eq "$n" ] || { echo "bench-scale.sh: found node PIDs '$pids', want $n" >&2; exit 1; }
	ticks() {
		t=0
		for p in $pids; do
			t=$((t + $(awk '{print $14 + $15}' /proc/"$p"/stat)))
		done
		echo $t
	}
	sleep 2 # let gossip settle
	idle0=$(ticks)
	sleep 2
	idle=$((($(ticks) - idle0) * 1000 / tick / 2))
	before=$(ticks)
	t0=$(date +%s%N)
	out=$("$loadgen" --targets "$targets" --duration "$duration" --max-calls "$calls" --concurrency 32 --items 1 --mode cached --keys 10000)
	after=$(ticks)
	ms=$((($(date +%s%N) - t0) / 1000000))
	done_calls=$(echo "$out" | sed -n 's/.*calls \([0-9]*\) (.*/\1/p' | head -1)
	busy=$(((after - before) * 1000 / tick - idle * ms / 1000))
	echo
	echo "== $n nodes (GOMAXPROCS=1 each), load average $(cut -d' ' -f1-3 /proc/loadavg): loadgen --concurrency 32 --max-calls $calls --items 1 --mode cached"
	echo "$out" | sed -n '2,8p'
	echo "nodes' CPU (all nodes): idle $idle ms/s; under load $(((after - before) * 1000 / tick)) ms in $ms ms, $((busy * 1000 / done_calls)) us per call above idle"
	stop
	sleep 1
done
