//go:build measure

package ringlimit

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"
)

// forger is one way to send a forged envelope to a node.
type forger struct {
	how  string
	send func(*peerv1.Envelope) error
}

// forge returns the ways an attacker can try: a stranger in plain text to
// the public gRPC port and to the peer port, and a member (n2's
// certificate, from the cluster's secret) on the peer port.
func forge(t *testing.T, n *Node) []forger {
	to := func(addr string, creds credentials.TransportCredentials) func(*peerv1.Envelope) error {
		return func(env *peerv1.Envelope) error {
			cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds), grpc.WithAuthority(n.Name()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = peerv1.NewPeerClient(cc).Deliver(ctx, &peerv1.DeliverRequest{Envelopes: []*peerv1.Envelope{env}})
			return err
		}
	}
	return []forger{
		{"a stranger, plain text to the public gRPC port", to(n.GRPCAddr(), insecure.NewCredentials())},
		{"a stranger, plain text to the peer port", to(n.PeerAddr(), insecure.NewCredentials())},
		{"member n2's certificate, to the peer port", to(n.PeerAddr(), member(t, "n2", testPeerSecret))},
	}
}
