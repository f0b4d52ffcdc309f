package conformance

import (
	"fmt"
	"math/rand"
	"net"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/ratelimit/src/config"
	"github.com/envoyproxy/ratelimit/src/provider"
	"github.com/envoyproxy/ratelimit/src/redis"
	"github.com/envoyproxy/ratelimit/src/server"
	ratelimit "github.com/envoyproxy/ratelimit/src/service"
	"github.com/envoyproxy/ratelimit/src/settings"
	"github.com/envoyproxy/ratelimit/src/stats"
	gostats "github.com/lyft/gostats"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
)

// loadLyft loads one config file as Lyft's service does (its file
// provider's steps: ConfigFileContentToYaml, then NewRateLimitConfigImpl),
// turning the panic by which it refuses a file into an error.
func loadLyft(name string, content []byte) (cfg config.RateLimitConfig, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	root := config.ConfigFileContentToYaml(name, string(content))
	sm := stats.NewStatManager(gostats.NewStore(gostats.NewNullSink(), false), settings.Settings{})
	return config.NewRateLimitConfigImpl([]config.RateLimitConfigToLoad{{Name: name, ConfigYaml: root}}, sm, false), nil
}

// staticProvider hands Lyft's service one configuration.
type staticProvider struct {
	ch chan provider.ConfigUpdateEvent
}

func (p staticProvider) ConfigUpdateEvent() <-chan provider.ConfigUpdateEvent { return p.ch }
func (p staticProvider) Stop()                                                {}

// configEvent is a loaded configuration.
type configEvent struct{ cfg config.RateLimitConfig }

func (e configEvent) GetConfig() (config.RateLimitConfig, any) { return e.cfg, nil }

// constSource makes the expiry jitter of Lyft's cache its maximum, so that
// no Redis key expires (in real time) during a run.
type constSource int64

func (s constSource) Int63() int64 { return int64(s) }
func (constSource) Seed(int64)     {}

// startLyft serves Lyft's service with cfg over the Redis at redisAddr,
// under the cache key prefix prefix, reading the time from clk, on a
// loopback port; it returns a client. Its cache is Lyft's fixed-window
// Redis cache with the service's defaults (near-limit ratio 0.8, no local
// cache, counting every hit).
func startLyft(t *testing.T, redisAddr, prefix string, cfg config.RateLimitConfig, clk *fakeClock) rlsv3.RateLimitServiceClient {
	t.Helper()
	store := gostats.NewStore(gostats.NewNullSink(), false)
	sm := stats.NewStatManager(store, settings.Settings{})
	client := redis.NewClientImpl(store.Scope("redis"), false, "", "tcp", "SINGLE", redisAddr, 2,
		0, 0, nil, false, nil, 10*time.Second, "", "")
	const jitter = 300 // seconds
	cache := redis.NewFixedRateLimitCacheImpl(client, nil, clk, rand.New(constSource(jitter-1)), jitter,
		nil, 0.8, prefix, sm, false)
	prov := staticProvider{ch: make(chan provider.ConfigUpdateEvent, 1)}
	prov.ch <- configEvent{cfg}
	// NewService reads the first configuration now and then waits for more
	// on a goroutine of its own that has no stop: one per file, parked.
	svc := ratelimit.NewService(cache, prov, sm, server.NewHealthChecker(health.NewServer(), "ratelimit", false),
		clk, false, false, false)
	return serve(t, func(g *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(g, svc) }, func() { _ = client.Close() })
}

// serve runs a gRPC server with register's services on a loopback port and
// returns an RLS v3 client of it; both stop when the test ends, then
// closeFn runs.
func serve(t *testing.T, register func(*grpc.Server), closeFn func()) rlsv3.RateLimitServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	register(g)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(lis)
	}()
	conn := dial(t, lis.Addr().String())
	t.Cleanup(func() {
		g.Stop()
		<-done
		closeFn()
	})
	return rlsv3.NewRateLimitServiceClient(conn)
}

// dial returns a client connection to addr, closed when the test ends.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
