#!/bin/sh
# Soak test: a 3-node cluster on loopback (scripts/cluster.sh) under steady
# load from cmd/loadgen over 100k keys. After a warm-up it samples each
# node's /metrics (goroutines, heap in use, resident memory, keys stored)
# every SOAK_SAMPLE seconds until the load ends, then reports the first and
# the last sample side by side, the load's errors and the nodes' error logs.
# Used by `make soak` (not in CI).
#
# Usage: scripts/soak.sh NODE_BINARY LOADGEN_BINARY
#
# Environment (seconds are whole numbers):
#   SOAK_SECONDS      length of the measured run after the warm-up (600)
#   SOAK_WARMUP       warm-up before the first sample (60)
#   SOAK_SAMPLE       time between samples (30)
#   SOAK_KEYS         distinct keys (100000)
#   SOAK_CONCURRENCY  calls in flight (8: steady load, not a benchmark)
#   SOAK_MODE         consistency mode of every check (cached)
#   SOAK_MAX_GROWTH   percent by which a node's heap in use or goroutines
#                     may grow from the first sample to the last (50)
#   RUN_DIR           logs, samples and the load report (default
#                     ${TMPDIR:-/tmp}/ringlimit-soak)
#   PORT_BASE         the ports of scripts/cluster.sh (7100: gRPC 7101-7103,
#                     HTTP 8101-8103, gossip 7946-7948, those of make run)
# It refuses to start if a node already answers on those ports.
# It stops only the processes it started, by their PIDs; every wait is
# bounded. Exit status 0: no failed call, no item error, no error logged, no
# node grew beyond SOAK_MAX_GROWTH.
set -eu

node=${1:-bin/ringlimit-node}
loadgen=${2:-bin/loadgen}
secs=${SOAK_SECONDS:-600}
warmup=${SOAK_WARMUP:-60}
every=${SOAK_SAMPLE:-30}
keys=${SOAK_KEYS:-100000}
conc=${SOAK_CONCURRENCY:-8}
mode=${SOAK_MODE:-cached}
maxgrowth=${SOAK_MAX_GROWTH:-50}
run_dir=${RUN_DIR:-${TMPDIR:-/tmp}/ringlimit-soak}
base=${PORT_BASE:-7100}
export PORT_BASE=$base # for cluster.sh
here=$(cd "$(dirname "$0")" && pwd)

for v in "$secs" "$warmup" "$every" "$keys" "$conc" "$maxgrowth"; do
	case $v in '' | *[!0-9]*) echo "soak.sh: SOAK_* settings must be whole numbers, got '$v'" >&2; exit 2 ;; esac
done
[ "$every" -ge 1 ] || { echo "soak.sh: SOAK_SAMPLE must be at least 1" >&2; exit 2; }
for b in "$node" "$loadgen"; do
	[ -x "$b" ] || { echo "soak.sh: $b is not an executable (run make soak)" >&2; exit 2; }
done
command -v curl >/dev/null || { echo "soak.sh: needs curl" >&2; exit 2; }
command -v jq >/dev/null || { echo "soak.sh: needs jq" >&2; exit 2; }
for i in 1 2 3; do
	if curl -fs -m 1 "http://127.0.0.1:$((base + 1000 + i))/healthz" >/dev/null 2>&1; then
		echo "soak.sh: a node already answers on 127.0.0.1:$((base + 1000 + i)); stop it first (make run?)" >&2
		exit 2
	fi
done
rm -rf "$run_dir"
mkdir -p "$run_dir"

cluster_pid=""
load_pid=""
cleanup() {
	trap - INT TERM EXIT
	[ -n "$load_pid" ] && kill -TERM "$load_pid" 2>/dev/null || true
	if [ -n "$cluster_pid" ]; then
		kill -TERM "$cluster_pid" 2>/dev/null || true
		wait "$cluster_pid" 2>/dev/null || true
	fi
}
trap cleanup INT TERM EXIT

# The cluster, in the background: cluster.sh stops its nodes on SIGTERM.
RUN_DIR=$run_dir "$here/cluster.sh" 3 "$node" >"$run_dir/cluster.out" 2>&1 &
cluster_pid=$!
tries=0
until [ "$(for i in 1 2 3; do curl -fs -m 1 "http://127.0.0.1:$((base + 1000 + i))/readyz" >/dev/null 2>&1 && echo ok; done | wc -l)" -eq 3 ]; do
	tries=$((tries + 1))
	if [ $tries -gt 300 ] || ! kill -0 "$cluster_pid" 2>/dev/null; then
		echo "soak.sh: the cluster is not ready after 30s; see $run_dir/" >&2
		cat "$run_dir/cluster.out" >&2
		exit 1
	fi
	sleep 0.1
done
echo "soak: 3 nodes ready; load: $keys keys, $conc in flight, mode $mode; warm-up ${warmup}s, then ${secs}s sampled every ${every}s"

total=$((warmup + secs))
"$loadgen" --targets 127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2)),127.0.0.1:$((base + 3)) --keys "$keys" --concurrency "$conc" \
	--mode "$mode" --limit 100 --period 1s --duration "${total}s" --max-calls 1000000000 --json \
	>"$run_dir/loadgen.json" 2>"$run_dir/loadgen.err" &
load_pid=$!

# sample LABEL: one line per node into samples.txt and on stdout: its
# goroutines, heap in use, resident memory and keys stored. The metrics are
# read whole before they are parsed (closing the pipe early would make the
# node log a broken pipe).
sample() {
	for i in 1 2 3; do
		curl -fs -m 5 -o "$run_dir/metrics.tmp" "http://127.0.0.1:$((base + 1000 + i))/metrics" || : >"$run_dir/metrics.tmp"
		line="$1 node$i $(awk '
			$1 == "go_goroutines" { g = $2 } $1 == "go_memstats_heap_inuse_bytes" { h = $2 }
			$1 == "process_resident_memory_bytes" { r = $2 } $1 == "ringlimit_keys" { k = $2 }
			END { printf "%.0f %.0f %.0f %.0f", g, h, r, k }' "$run_dir/metrics.tmp")"
		echo "$line" >>"$run_dir/samples.txt"
		echo "$line" | awk '{ printf "  %6ss  %s  goroutines %5s  heap %7.1f MiB  rss %7.1f MiB  keys %7s\n", $1, $2, $3, $4/1048576, $5/1048576, $6 }'
	done
}

sleep "$warmup"
echo "t (after warm-up)  node  goroutines  heap in use  resident  keys stored"
t=0
sample "$t"
# Sample every SOAK_SAMPLE seconds, the last one 2s before the load ends
# (at most secs/every + 1 samples), then wait, bounded, for the load
# generator to finish.
while [ $t -lt "$secs" ]; do
	step=$every
	[ $((t + step)) -ge "$secs" ] && step=$((secs - t - 2))
	[ "$step" -ge 1 ] || break
	sleep "$step"
	t=$((t + step))
	kill -0 "$load_pid" 2>/dev/null || break
	sample "$t"
done
waited=0
while kill -0 "$load_pid" 2>/dev/null; do
	waited=$((waited + 1))
	if [ $waited -gt 600 ]; then
		echo "soak.sh: the load generator is still running 60s after its end; stopping it" >&2
		kill -TERM "$load_pid" 2>/dev/null || true
		break
	fi
	sleep 0.1
done
load_status=0
wait "$load_pid" || load_status=$?
load_pid=""

# Stop the cluster gracefully and see that every node exits cleanly.
kill -TERM "$cluster_pid" 2>/dev/null || true
cluster_status=0
wait "$cluster_pid" || cluster_status=$?
cluster_pid=""

errors=0
echo
echo "load generator (exit $load_status):"
if jq -e . "$run_dir/loadgen.json" >/dev/null 2>&1; then
	jq -r '"  \(.seconds|floor)s  calls \(.calls) (\(.calls_per_sec|floor)/s)  under limit \(.under_limit)  over limit \(.over_limit)  item errors \(.item_errors)  failed calls \(.rpc_errors)"' "$run_dir/loadgen.json"
	jq -r '.latency[] | "  \(.class): p50 \(.p50_ms) ms  p99 \(.p99_ms) ms  max \(.p100_ms) ms"' "$run_dir/loadgen.json"
	errors=$((errors + $(jq '.rpc_errors + .item_errors' "$run_dir/loadgen.json")))
else
	echo "  no report; its stderr:"
	cat "$run_dir/loadgen.err"
	errors=$((errors + 1))
fi
[ "$load_status" -eq 0 ] || errors=$((errors + 1))
# Errors logged while serving, before the shutdown began (memberlist logs
# sends on closed sockets as errors while it stops).
logged=$(for f in "$run_dir"/node*.log; do
	awk '/signal received; shutting down/ { exit } /level=ERROR/ { n++ } END { print n + 0 }' "$f"
done | awk '{ s += $1 } END { print s + 0 }')
echo "  ERROR lines in the node logs while serving: $logged; nodes stopped cleanly: $([ "$cluster_status" -eq 0 ] && echo yes || echo no)"
if [ "$(jq '.rpc_errors' "$run_dir/loadgen.json" 2>/dev/null || echo 0)" -gt 0 ]; then
	echo "  failed calls by code: $(jq -c '.rpc_error_codes' "$run_dir/loadgen.json")"
fi
errors=$((errors + logged))
[ "$cluster_status" -eq 0 ] || errors=$((errors + 1))

echo
echo "first and last sample after the warm-up (growth allowed: ${maxgrowth}%):"
first=$(awk 'NR == 1 { print $1 }' "$run_dir/samples.txt")
last=$(awk 'END { print $1 }' "$run_dir/samples.txt")
report=$(awk -v f="$first" -v l="$last" -v g="$maxgrowth" '
	$1 == f { gs[$2] = $3; hs[$2] = $4; rs[$2] = $5; ks[$2] = $6 }
	$1 == l { ge[$2] = $3; he[$2] = $4; re[$2] = $5; ke[$2] = $6 }
	END {
		bad = 0
		for (n in gs) {
			verdict = "flat"
			if (ge[n] > gs[n] * (1 + g / 100) + 10 || he[n] > hs[n] * (1 + g / 100)) { verdict = "GREW"; bad++ }
			printf "  %s  goroutines %d -> %d   heap in use %.1f -> %.1f MiB   resident %.1f -> %.1f MiB   keys %d -> %d   %s\n",
				n, gs[n], ge[n], hs[n] / 1048576, he[n] / 1048576, rs[n] / 1048576, re[n] / 1048576, ks[n], ke[n], verdict
		}
		print "grew " bad
	}' "$run_dir/samples.txt")
echo "$report" | grep -v '^grew ' | sort
grew=$(echo "$report" | awk '$1 == "grew" { print $2 }')
echo "  (samples from ${first}s to ${last}s after the warm-up; all in $run_dir/samples.txt)"
echo
if [ "$errors" -eq 0 ] && [ "$grew" -eq 0 ]; then
	echo "soak: PASS (no errors; goroutines and heap flat)"
	exit 0
fi
echo "soak: FAIL ($errors errors; $grew nodes grew)"
exit 1
