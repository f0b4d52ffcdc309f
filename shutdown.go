package ringlimit

import (
	"context"
	"errors"
	"net"
	"time"
)

// Shutdown stops the node gracefully, in this order:
//
//  1. it stops taking public calls (they get Unavailable; /readyz turns 503)
//     and waits for the calls in flight to be answered;
//  2. it hands every key it owns to the key's next owner (the core's Leave),
//     waiting at most Config.Shutdown.HandoffTimeout;
//  3. it tells the cluster it leaves (gossip), waiting at most
//     Config.Shutdown.LeaveTimeout, so the others drop it at once instead of
//     detecting a failure;
//  4. it stops the servers (giving the peers' streams to it streamGrace to
//     end), the links to the peers and every goroutine, and waits for them.
//
// When ctx ends first, the remaining steps are cut short and the servers are
// stopped at once; Shutdown still waits for every goroutine and returns
// ctx's error. Calling Shutdown or Close again returns the first result.
func (n *Node) Shutdown(ctx context.Context) error {
	n.stopOnce.Do(func() { n.stopErr = n.shutdown(ctx) })
	return n.stopErr
}

// Close stops the node at once, without handing off its keys or telling the
// cluster: to the others it looks like a crash. Calls in flight fail. It
// waits for every goroutine. Use Shutdown for a graceful stop.
func (n *Node) Close() error {
	n.stopOnce.Do(func() {
		n.log.Info("closing abruptly")
		n.gate.close()
		if n.grpcSrv != nil {
			n.grpcSrv.Stop()
		}
		if n.peerSrv != nil {
			n.peerSrv.Stop()
		}
		if n.httpSrv != nil {
			_ = n.httpSrv.Close()
		}
		n.stopErr = n.teardown()
	})
	return n.stopErr
}

// streamGrace bounds how long Shutdown waits, after leaving, for the
// servers' calls and streams to end by themselves: public calls were drained
// already, and the peers close their streams to a node once they see it
// leave, within a gossip round.
const streamGrace = 2 * time.Second

func (n *Node) shutdown(ctx context.Context) error {
	n.log.Info("shutting down")
	start := time.Now()
	select {
	case <-n.gate.close():
	case <-ctx.Done():
		n.log.Warn("shutdown: calls still in flight", "err", ctx.Err())
	}

	if ctx.Err() == nil && n.cl.Ready() {
		n.leaving.Store(true)
		leave := func(now time.Time) { n.core.Leave(now); n.publishRing() }
		if err := n.drv.Do(ctx, leave); err != nil {
			n.log.Warn("shutdown: leave not applied", "err", err)
		}
		t := time.NewTimer(n.cfg.Shutdown.HandoffTimeout)
		select {
		case <-n.handed:
			n.log.Info("keys handed off", "took", time.Since(start))
		case <-t.C:
			n.log.Warn("shutdown: hand-off unfinished", "timeout", n.cfg.Shutdown.HandoffTimeout)
		case <-ctx.Done():
			n.log.Warn("shutdown: hand-off unfinished", "err", ctx.Err())
		}
		t.Stop()
		if err := n.cl.Leave(n.cfg.Shutdown.LeaveTimeout); err != nil {
			n.log.Warn("shutdown: gossip leave", "err", err)
		}
	}

	stopped := make(chan struct{})
	go func() { // joined below: stopped is always closed
		defer close(stopped)
		n.grpcSrv.GracefulStop()
		if n.peerSrv != nil {
			n.peerSrv.GracefulStop()
		}
	}()
	if n.httpSrv != nil {
		if err := n.httpSrv.Shutdown(ctx); err != nil {
			_ = n.httpSrv.Close()
		}
	}
	// Peers' streams end when they see this node leave; one that missed the
	// leave (cut off) would hold GracefulStop, so it gets streamGrace.
	grace := time.NewTimer(streamGrace)
	defer grace.Stop()
	select {
	case <-stopped:
	case <-ctx.Done():
	case <-grace.C:
		n.log.Warn("shutdown: peer streams still open; closing them", "after", streamGrace)
	}
	n.grpcSrv.Stop() // no-ops once GracefulStop is done
	if n.peerSrv != nil {
		n.peerSrv.Stop()
	}
	<-stopped
	err := n.teardown()
	n.log.Info("stopped", "took", time.Since(start))
	if ctx.Err() != nil {
		return errors.Join(ctx.Err(), err)
	}
	return err
}

// teardown stops what Start started, after the servers: the gossip (whose
// callback feeds the transport), the rules poller, the transport, then the
// core's driver, and waits for every goroutine. It tolerates a partly built
// node.
func (n *Node) teardown() error {
	var errs []error
	if n.cl != nil {
		errs = append(errs, n.cl.Close())
	}
	close(n.stopTick)
	if n.tr != nil {
		errs = append(errs, n.tr.Close())
	}
	if n.drv != nil {
		n.drv.Close() // after the transport: nothing feeds it any more
	}
	for _, ln := range []net.Listener{n.grpcLn, n.peerLn, n.httpLn} {
		if ln != nil {
			_ = ln.Close() // already closed by the servers, unless Start failed early
		}
	}
	n.cancel()
	n.wg.Wait()
	return errors.Join(errs...)
}
