#!/bin/sh
# Start an N-node ringlimit cluster on loopback and stop it on Ctrl-C.
# Used by `make run` (N=3) and `make cluster N=...`.
#
# Usage: [PORT_BASE=B] [RUN_DIR=DIR] scripts/cluster.sh N BINARY
#
# Node i (1..N) is named node<i> and listens on ports counted from PORT_BASE
# (default 7100):
#   gRPC    127.0.0.1:B+i        (7101, 7102, ...)
#   HTTP    127.0.0.1:B+1000+i   (8101, 8102, ...)
#   gossip  127.0.0.1:B+845+i    (7946, 7947, ...; node1's is the seed of the others)
#   peers   127.0.0.1:B+100+i    (7201, 7202, ...)
# Before starting anything it binds every one of those ports (TCP, and UDP
# for gossip) with the portcheck helper that sits beside BINARY (or
# $PORTCHECK), and refuses to start, naming the port, if one is taken.
# Logs go to $RUN_DIR/node<i>.log; without RUN_DIR, to a new directory
# ${TMPDIR:-/tmp}/ringlimit-run-<base>-XXXXXX, so no run overwrites another's
# logs. Extra node flags can be passed in the environment
# (RINGLIMIT_MODE=owner, ...). The nodes encrypt gossip and authenticate
# each other with the gossip key RINGLIMIT_GOSSIP_KEY; unless it is set, a
# fresh one is drawn for the run. Only the processes started here are
# stopped, by their PIDs.
set -eu

n=${1:-3}
bin=${2:-bin/ringlimit-node}
base=${PORT_BASE:-7100}
portcheck=${PORTCHECK:-$(dirname "$bin")/portcheck}

# in_range NAME VALUE LO HI exits unless VALUE is a whole number in [LO, HI].
in_range() {
	case $2 in
	'' | *[!0-9]*) ;;
	*) [ "$2" -ge "$3" ] && [ "$2" -le "$4" ] && return 0 ;;
	esac
	echo "cluster.sh: $1 must be a number from $3 to $4, got '$2'" >&2
	exit 2
}
in_range N "$n" 1 50
# The highest port is PORT_BASE+1000+50.
in_range PORT_BASE "$base" 1024 64485
[ -x "$bin" ] || { echo "cluster.sh: $bin is not an executable (run make run)" >&2; exit 2; }
[ -x "$portcheck" ] || { echo "cluster.sh: $portcheck is not an executable (run make run)" >&2; exit 2; }

grpc_port() { echo $((base + $1)); }
http_port() { echo $((base + 1000 + $1)); }
gossip_port() { echo $((base + 845 + $1)); }
peer_port() { echo $((base + 100 + $1)); }

# Every port this cluster needs must be free before any node starts: a
# node that cannot listen exits, and another cluster on the same ports
# would answer the readiness checks below in its place.
ports=""
i=1
while [ "$i" -le "$n" ]; do
	ports="$ports tcp:$(grpc_port $i) tcp:$(http_port $i) tcp:$(gossip_port $i) udp:$(gossip_port $i) tcp:$(peer_port $i)"
	i=$((i + 1))
done
# shellcheck disable=SC2086 # one argument per port
if ! "$portcheck" 127.0.0.1 $ports; then
	echo "cluster.sh: a port of this cluster is taken (above), so no node was started." >&2
	alt=$((base + 10000))
	[ "$alt" -le 64485 ] || alt=$((base - 10000))
	echo "Stop what holds it, or start on other ports: make run PORT_BASE=$alt (node i: gRPC $alt+i, HTTP $alt+1000+i, gossip $alt+845+i, peers $alt+100+i)." >&2
	exit 2
fi

if [ -n "${RUN_DIR:-}" ]; then
	run_dir=$RUN_DIR
	mkdir -p "$run_dir"
else
	run_dir=$(mktemp -d "${TMPDIR:-/tmp}/ringlimit-run-$base-XXXXXX")
fi

# Each node runs in a session of its own (setsid, where there is one), so the
# Ctrl-C that the terminal sends to its foreground process group reaches only
# this script, which then stops every node exactly once, with SIGTERM. (A node
# signalled twice stops at once instead of gracefully.) Run from a script
# without job control, setsid execs in place: $! is the node's own PID.
detach=""
command -v setsid >/dev/null 2>&1 && detach=setsid

pids=""
stop() {
	trap - EXIT
	[ -n "$pids" ] || exit 0
	# A second Ctrl-C (or TERM) sends the nodes a second SIGTERM, which stops
	# them at once, and this script still waits for them: were it to die here,
	# the nodes (each in a session of its own) would run on, detached.
	trap 'echo "second signal: stopping the nodes at once ..."; for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done' INT TERM
	echo
	echo "stopping the nodes (SIGTERM: drain, hand off, leave) ..."
	for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
	status=0
	for p in $pids; do
		# A trapped signal interrupts wait (status above 128) while the node
		# still runs: wait again until it has exited.
		while :; do
			rc=0
			wait "$p" || rc=$?
			[ "$rc" -gt 128 ] && kill -0 "$p" 2>/dev/null && continue
			break
		done
		[ "$rc" -eq 0 ] || status=1
	done
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
	[ "$i" -gt 1 ] && seeds=127.0.0.1:$(gossip_port 1)
	$detach "$bin" --name "node$i" \
		--grpc-addr "127.0.0.1:$(grpc_port $i)" \
		--http-addr "127.0.0.1:$(http_port $i)" \
		--gossip-addr "127.0.0.1:$(gossip_port $i)" \
		--peer-addr "127.0.0.1:$(peer_port $i)" \
		--gossip-profile local \
		--seeds "$seeds" \
		>"$run_dir/node$i.log" 2>&1 &
	pids="$pids $!"
	i=$((i + 1))
done

# Wait until every node is ready (joined), for at most 15 seconds. A node
# that has exited is not waited for: its log says why.
i=1
tries=0
while [ "$i" -le "$n" ]; do
	pid=$(echo $pids | cut -d' ' -f"$i")
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "node$i exited at start; its log ($run_dir/node$i.log):" >&2
		tail -n 20 "$run_dir/node$i.log" >&2
		exit 1
	fi
	if curl -fs "http://127.0.0.1:$(http_port $i)/readyz" >/dev/null 2>&1; then
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

addrs=""
echo "ringlimit: $n nodes ready on 127.0.0.1, GOMAXPROCS=$GOMAXPROCS each (logs in $run_dir/):"
i=1
while [ "$i" -le "$n" ]; do
	echo "  node$i  gRPC 127.0.0.1:$(grpc_port $i)  HTTP http://127.0.0.1:$(http_port $i)  gossip 127.0.0.1:$(gossip_port $i)  peers 127.0.0.1:$(peer_port $i)"
	addrs="${addrs:+$addrs,}127.0.0.1:$(grpc_port $i)"
	i=$((i + 1))
done
cat <<EOF

Try it (in another terminal):

  curl -s -H 'Content-Type: application/json' http://127.0.0.1:$(http_port 1)/v1/check \\
    -d '{"items":[{"name":"api","unique_key":"alice","hits":1,"limit":5,"period":"1m","mode":"owner"}]}'

  curl -s http://127.0.0.1:$(http_port 2)/v1/cluster

The CLI (bin/ringlimit) and the load generator (cmd/loadgen) reach this
cluster through these variables:

  export RINGLIMIT_ADDR=$addrs RINGLIMIT_HTTP=127.0.0.1:$(http_port 1)

Press Ctrl-C to stop every node.
EOF
wait
