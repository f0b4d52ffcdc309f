// Package peer is ringlimit's real network: discovery and failure detection
// over hashicorp/memberlist (Cluster), and the gRPC link between nodes that
// carries the coordination core's envelopes (Transport, which implements
// rlsync.Transport and serves the peerv1.Peer service). It holds no limiter
// logic: it never looks inside an envelope's body.
//
// Members are identified by their node name, never by an address: several
// nodes may share a host, and a node recognises itself by name. Each node
// advertises its peer address, the peer protocol version and its process
// incarnation in its memberlist metadata; the Transport accepts from a
// member only envelopes of the incarnation gossip reports.
//
// The module root wires the pieces like this; every input of the core goes
// through the Driver, which applies them one after another on its own
// goroutine:
//
//	tr, err := peer.NewTransport(peer.TransportConfig{Self: name, ...})
//	core, err := rlsync.NewNode(syncCfg, tr)     // tr.Send never blocks
//	drv, err := peer.NewDriver(core, peer.DriverConfig{TickInterval: syncCfg.TickInterval})
//	tr.RegisterServer(peerServer)                // a gRPC server of the peer port's own
//	cl, err := peer.NewCluster(clusterCfg, func(ms []peer.Member) {
//		tr.SetPeers(ms)                          // addresses first, ...
//		drv.Do(ctx, func(now time.Time) {        // ... then the ring, in the core's order
//			core.SetMembership(now, peer.Names(ms), cl.Failed())
//		})
//	})
//	drv.Start(ctx)                               // the loop: inputs, and Tick
//	err = tr.Start(ctx, drv)                     // the driver is the Handler
//	err = cl.Start(ctx)                          // create memberlist, join seeds
//	drv.Check(reqs, resps, done)                 // per client call
//	...
//	drv.Do(ctx, core.Leave); /* until core.HandedOff(), read in drv.Do */
//	cl.Leave(time.Second); cl.Close(); tr.Close(); drv.Close()
//
// Every goroutine has an owner: NewCluster and NewTransport start none;
// Start starts them and Close stops them and waits for them to exit.
//
// With mutual TLS (MutualTLS, from per-node certificates or derived from a
// cluster secret by SecretTLS), the transport dials each peer with its
// client credentials and the peer's name as the TLS server name, the peer
// port's server requires a client certificate of the cluster's CA, and
// AuthorizeCertificate accepts an envelope only from the node the client's
// certificate names. Gossip is encrypted with ClusterConfig.SecretKey
// (memberlist's keyring; SecondaryKeys for a rotation).
//
// Delivery is one-way and at most once: a batch whose Deliver RPC fails is
// dropped and the sender's Handler is told the peer is Unreachable; package
// sync retries whatever must be retried. The transport never retries a
// Deliver itself, because a retry after a timeout could deliver a
// non-idempotent message (a flush of hits) twice.
package peer
