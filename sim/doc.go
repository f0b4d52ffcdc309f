// Package sim is a deterministic discrete-event simulation of a ringlimit
// cluster. It answers the question "with N nodes, this flush interval and
// this mode, how far from the true limit will my cluster drift when the
// network splits, and how fast does it recover?".
//
// It drives the real code: every member is an rlsync.Node, every bucket
// comes from package bucket, owners come from package ring. What is
// simulated is everything around them:
//
//   - a virtual clock (time starts at Epoch) and an event queue per node.
//     No message between nodes arrives sooner than the shortest link
//     latency, so the nodes run the events of each such window on their
//     own, on several goroutines at once (Options.Workers), and the result
//     is the same, byte for byte, on one goroutine or many (step.go);
//   - the network, an rlsync.Transport per node: latency plus jitter per
//     link, loss, FIFO or reordering links, partitions (groups, one node,
//     the owner of the hottest key, one-way cuts, flapping links) and heals;
//     a send to a node that is down or cut off is reported to the sender with
//     Node.Unreachable after a delay (a refused connection, an RPC deadline);
//   - membership as gossip would deliver it: each node's view changes a
//     detection delay after a crash or a partition (memberlist's suspicion,
//     with indirect probes through third nodes) and a shorter delay after a
//     join, a graceful leave (Leave, then HandedOff) or a heal; every view
//     change is a SetMembers on that node;
//   - clients: one arrival process (Poisson or evenly spaced, steady or
//     on/off), keys drawn uniform, zipf or one hot key, requests of several
//     hits now and then, spread over nodes by a load balancer that may be
//     skewed and routes around nodes that are down;
//   - the reference: an ideal single limiter (one bucket per key, the same
//     algorithm) fed the merged arrival stream in arrival order.
//
// Every random choice comes from generators seeded from one seed, one per
// concern (and one per node for the network), so the arrivals are the same
// for every mode compared and the same seed gives the same output, byte for
// byte.
//
// Accuracy is measured per key and per window (Scenario.Window): the hits a
// node admitted beyond what the ideal admitted for that key in that window
// are over-admission, the hits short of it false rejections. Requests count
// in the window they arrived in. A scenario with faults is reported whole and
// per phase: before, during and after the disruption; the convergence time is
// how long after the disruption the admissions per window come back within
// Scenario.Tolerance of the ideal for good.
//
// The caller's loop:
//
//	sc, err := sim.Named("partition-half") // or sim.LoadFile("my.json")
//	sc = sc.Scale(5, 60*time.Second)
//	vs, err := sim.ParseVariants("cached,leased", "50ms,100ms")
//	results, err := sim.Compare([]sim.Scenario{sc}, vs, sim.Options{Seed: 1})
//	sim.WriteTable(os.Stdout, results) // or WriteJSON, WriteCSV, WriteSVG
//
// The command cmd/sim wraps it; docs/accuracy.md shows the results.
package sim
