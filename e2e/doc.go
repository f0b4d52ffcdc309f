//go:build e2e

// Package e2e runs ringlimit nodes as real processes, in containers on
// private Docker networks, and injects real faults: kill -9, a node cut off
// the network, a rolling restart with SIGTERM, a cluster split in two. Every
// scenario runs under steady load from the test process (gRPC, bounded in
// count and time), reports what it measured (t.Logf, and one machine-readable
// line "E2E-RESULT {json}" on standard output) and asserts the properties of
// docs/reliability.md.
//
// The files carry the build tag e2e, so `make test` does not run them:
//
//	make e2e                                  # every scenario
//	go test -tags e2e -run TestKill -v ./e2e/ # one
//
// TestMain builds the node statically (CGO_ENABLED=0), puts it in the image
// ringlimit:e2e FROM scratch (../Dockerfile), and fails at once if the Docker
// daemon cannot be reached. Each test creates its own networks and containers,
// named rle2e-<random>-..., labelled ringlimit.e2e.run=<this run>, and removes
// them when it ends, passed or failed; an interrupt, or the approach of
// go test's -timeout, removes whatever this run still has.
//
// The cluster's layout: every container is on a client network, through which
// the test (on the host) calls it, and on each of the "home" networks of the
// cluster; a node gossips and talks to its peers at its address on its home
// network. Cutting the cluster into groups disconnects each node from the home
// networks of the other groups (docker network disconnect), so peers cannot
// reach each other across the cut while the test still reaches every node.
// A silent cut (silent_test.go) instead drops, with iptables inside each
// node's network namespace (nsenter from the host, as root), every packet
// to and from the other groups' addresses: nothing is refused, so a node
// notices only by its timeouts and failure detection, as behind a dead
// switch. All networks are --internal: no route leaves them.
package e2e
