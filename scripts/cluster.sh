#!/bin/sh
# Start an N-node ringlimit cluster on loopback and stop it on Ctrl-C.
# Used by `make run` (N=3) and `make cluster N=...`.
#
# Usage: scripts/cluster.sh N BINARY
#
# Node i (1..N) is named node<i> and listens on fixed ports:
#   gRPC    127.0.0.1:710<i>   (7100 + i)
#   HTTP    127.0.0.1:810<i>   (8100 + i)
#   gossip  127.0.0.1:794<5+i> (7945 + i; node1 is 7946, the seed of the others)
#   peers   127.0.0.1:720<i>   (7200 + i)
# Logs go to $RUN_DIR/node<i>.log (default /tmp/ringlimit-run). Extra node
# flags can be passed in the environment (RINGLIMIT_MODE=owner, ...).
# The nodes encrypt gossip and authenticate each other with the gossip key
# RINGLIMIT_GOSSIP_KEY; unless it is set, a fresh one is drawn for the run.
# Only the processes started here are stopped, by their PIDs.
set -eu

n=${1:-3}
bin=${2:-bin/node}
run_dir=${RUN_DIR:-${TMPDIR:-/tmp}/ringlimit-run}

case $n in
'' | *[!0-9]*) echo "cluster.sh: N must be a number from 1 to 50, got '$n'" >&2; exit 2 ;;
esac
if [ "$n" -lt 1 ] || [ "$n" -gt 50 ]; then
	echo "cluster.sh: N must be a number from 1 to 50, got $n" >&2
	exit 2
fi
[ -x "$bin" ] || { echo "cluster.sh: $bin is not an executable (run make run)" >&2; exit 2; }
mkdir -p "$run_dir"

# Each node runs in a session of its own (setsid, where there is one), so the
# Ctrl-C that the terminal sends to its foreground process group reaches only
# this script, which then stops every node exactly once, with SIGTERM. (A node
# signalled twice stops at once instead of gracefully.) Run from a script
# without job control, setsid execs in place: $! is the node's own PID.
detach=""
command -v setsid >/dev/null 2>&1 && detach=setsid

pids=""
stop() {
	trap - INT TERM EXIT
	[ -n "$pids" ] || exit 0
	echo
	echo "stopping the nodes (SIGTERM: drain, hand off, leave) ..."
	for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
	status=0
	for p in $pids; do wait "$p" || status=1; done
	[ $status -eq 0 ] && echo "all nodes stopped cleanly." || echo "some node exited with an error: see $run_dir/*.log"
	exit $status
}
trap stop INT TERM EXIT

# Nodes started together on one machine share its cores. Unless GOMAXPROCS
# is set, each node gets its share of them, cores / N (at least one): given
# every core, three nodes on two cores spend their time switching between
# threads (docs/bench.md: 20-40% more CPU per call, and a forwarded p99 over
# 5 ms instead of under).
if [ -z "${GOMAXPROCS:-}" ]; then
	cores=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
	GOMAXPROCS=$((cores / n))
	[ "$GOMAXPROCS" -ge 1 ] || GOMAXPROCS=1
	export GOMAXPROCS
fi

if [ -z "${RINGLIMIT_GOSSIP_KEY:-}${RINGLIMIT_GOSSIP_KEYS:-}${RINGLIMIT_PEER_SECRET:-}" ]; then
	RINGLIMIT_GOSSIP_KEY=$(head -c 32 /dev/urandom | base64)
	export RINGLIMIT_GOSSIP_KEY
fi

i=1
while [ "$i" -le "$n" ]; do
	seeds=""
	[ "$i" -gt 1 ] && seeds=127.0.0.1:7946
	$detach "$bin" --name "node$i" \
		--grpc-addr "127.0.0.1:$((7100 + i))" \
		--http-addr "127.0.0.1:$((8100 + i))" \
		--gossip-addr "127.0.0.1:$((7945 + i))" \
		--peer-addr "127.0.0.1:$((7200 + i))" \
		--gossip-profile local \
		--seeds "$seeds" \
		>"$run_dir/node$i.log" 2>&1 &
	pids="$pids $!"
	i=$((i + 1))
done

# Wait until every node is ready (joined), for at most 15 seconds.
i=1
tries=0
while [ "$i" -le "$n" ]; do
	if curl -fs "http://127.0.0.1:$((8100 + i))/readyz" >/dev/null 2>&1; then
		i=$((i + 1))
		continue
	fi
	tries=$((tries + 1))
	if [ $tries -gt 150 ]; then
		echo "node$i is not ready after 15s; its log:" >&2
		tail -n 20 "$run_dir/node$i.log" >&2
		exit 1
	fi
	sleep 0.1
done

echo "ringlimit: $n nodes ready on 127.0.0.1, GOMAXPROCS=$GOMAXPROCS each (logs in $run_dir/):"
i=1
while [ "$i" -le "$n" ]; do
	echo "  node$i  gRPC 127.0.0.1:$((7100 + i))  HTTP http://127.0.0.1:$((8100 + i))  gossip 127.0.0.1:$((7945 + i))"
	i=$((i + 1))
done
cat <<'EOF'

Try it (in another terminal):

  curl -s -H 'Content-Type: application/json' http://127.0.0.1:8101/v1/check \
    -d '{"items":[{"name":"api","unique_key":"alice","hits":1,"limit":5,"period":"1m","mode":"owner"}]}'

  curl -s http://127.0.0.1:8102/v1/cluster

Press Ctrl-C to stop every node.
EOF
wait
