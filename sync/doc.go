// Package sync is ringlimit's coordination core: the owner's authoritative
// store, the non-owners' cached view and pending hits, flush batches, pushes,
// leases, hand-off on membership change and the partition policy.
//
// It shares its name with the standard library's package; callers import it
// as rlsync.
//
// A Node is a state machine, like etcd's raft: it never reads the clock, never
// sleeps, starts no goroutine and opens no socket. Time comes in as an
// argument; messages to other nodes go out through the Transport it is given;
// messages from them come in through Step. The real node's driver
// (peer.Driver, used by the module root) applies its inputs from one
// goroutine: gRPC handlers, the transport and the ticker queue them; the
// simulator (package sim) drives the very same code from a virtual clock and
// a simulated network.
//
// A Node is sequential: it has no lock and is not safe for concurrent use.
// Its driver applies every input (a check, a message, an unreachable
// report, a tick, a membership change, the leave, a read of its state) whole,
// one after another, in one order, so no input ever acts on state that
// another changed under it. The driver's loop:
//
//	n, err := rlsync.NewNode(cfg, transport)        // transport.Send must not block
//	n.SetMembers(now, []string{"a", "b", "c"})      // on every membership change
//	n.Check(now, reqs, resps, func() { ... })       // per client call; done once resps are filled
//	n.Step(now, msg)                                // per message received from a peer
//	n.Unreachable(now, peer)                        // when a send to peer failed
//	n.Tick(now)                                     // every Config.TickInterval
//	n.Leave(now); for !n.HandedOff() { Tick; Step } // graceful stop: hand off, then go
//
// Check, Step, Tick and the others never block; they call Transport.Send
// and the done callbacks synchronously, so neither may block nor call back
// into the Node. Only Metrics' counters may be read from another goroutine.
//
// What each mode guarantees, the drift bound of cached mode and the measured
// figures are in docs/consistency.md. In short: the ring gives every key one
// owner, which holds its authoritative bucket. A non-owner in cached mode
// decides from its view of the owner's state and a budget (its share of what
// the view shows), flushes the hits it admitted every FlushInterval, or early
// once SyncFraction of the capacity went unseen, and installs the owner's
// answer; the owner pushes changed states to the nodes interested. Leased
// mode spends tokens the owner drained from its bucket and granted; owner
// mode forwards, batched. The protocol is in wire.go.
//
// Records (record.go): a key this node owns is an ownedKey, its
// authoritative bucket with its interest, the owner's own admissions and
// demand; a key owned elsewhere that this node checks is a cachedKey, its
// view of the owner's state with the hits pending and in flight, its share
// and the demand asked. Each role has its own table in the key's shard and
// its own flags; a membership change or a promotion replaces the record by
// one of the other role (toOwned, toCached). Local buckets (ModeLocal, the
// local-share policy) are localKeys; a lease, a backup held for another
// owner and a hand-off in flight are lease, heldBackup and handoffBatch.
//
// Reproducibility: given the same calls with the same times, a Node sends
// the same messages in the same order. It never iterates a map to build a
// message (keys are taken from slices or sorted) and draws no random
// number, so the simulator's runs are reproducible from its seed.
package sync
