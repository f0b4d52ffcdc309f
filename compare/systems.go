package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	gubernator "github.com/gubernator-io/gubernator/v2"
)

// cluster is one running system: its processes and the gRPC address of
// each node (node i is nodes[i], serving at addrs[i], called ids[i] in the
// answers that name an owner).
type cluster struct {
	procs *procSet
	nodes []*proc
	addrs []string
	ids   []string
}

// stop stops every process of the cluster by its PID.
func (c *cluster) stop() { c.procs.stopAll(10 * time.Second) }

// indexOf returns the node whose id is id, or -1.
func (c *cluster) indexOf(id string) int {
	for i, s := range c.ids {
		if s == id {
			return i
		}
	}
	return -1
}

// env is the environment of every server process: GOMAXPROCS and tracing
// off (Gubernator's OpenTelemetry exporter; Lyft's tracing is off unless
// TRACING_ENABLED is set).
func (cfg *config) env() []string {
	return []string{"GOMAXPROCS=" + strconv.Itoa(cfg.gomaxprocs), "OTEL_TRACES_EXPORTER=none"}
}

// loopback is the address every server listens on, but Gubernator's.
const loopback = "127.0.0.1"

// addr returns 127.0.0.1:port.
func addr(port int) string { return hostAddr(loopback, port) }

// hostAddr returns host:port.
func hostAddr(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// startBaseline starts n baseline processes (this binary, -serve-baseline).
func startBaseline(ctx context.Context, cfg *config, n int) (*cluster, error) {
	c := &cluster{procs: &procSet{logDir: cfg.logDir}}
	ports, err := freePorts(loopback, n)
	if err != nil {
		return nil, err
	}
	for i, p := range ports {
		pr, err := c.procs.start("baseline"+strconv.Itoa(i+1), cfg.self, []string{"-serve-baseline", addr(p)}, cfg.env())
		if err != nil {
			c.stop()
			return nil, err
		}
		c.nodes, c.addrs = append(c.nodes, pr), append(c.addrs, addr(p))
		c.ids = append(c.ids, "baseline")
	}
	err = waitFor(ctx, c.procs, 20*time.Second, func(context.Context) error { return dialAll(c.addrs) })
	if err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// dialAll returns nil when every address accepts a TCP connection.
func dialAll(addrs []string) error {
	for _, a := range addrs {
		cn, err := net.DialTimeout("tcp", a, time.Second)
		if err != nil {
			return err
		}
		cn.Close()
	}
	return nil
}

// ringlimitRules is the rules file of ringlimit's nodes: one rule per
// descriptor value, in cached mode (domain rlsDomain) and in owner mode
// (rlsDomainOwner).
const ringlimitRules = `domain: ` + rlsDomain + `
mode: cached
descriptors:
  - key: ` + rlsKey + `
    rate_limit: {unit: second, requests_per_unit: 1000}
---
domain: ` + rlsDomainOwner + `
mode: owner
descriptors:
  - key: ` + rlsKey + `
    rate_limit: {unit: second, requests_per_unit: 1000}
`

// lyftRules is the same rule for Lyft's service (which has no modes).
const lyftRules = `domain: ` + rlsDomain + `
descriptors:
  - key: ` + rlsKey + `
    rate_limit: {unit: second, requests_per_unit: 1000}
`

// startRinglimit starts n ringlimit nodes on loopback, joined by gossip,
// and waits until every node is ready and its ring holds all n.
func startRinglimit(ctx context.Context, cfg *config, n int) (*cluster, error) {
	rulesPath := filepath.Join(cfg.logDir, "ringlimit-rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(ringlimitRules), 0o644); err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	ports, err := freePorts(loopback, 3*n)
	if err != nil {
		return nil, err
	}
	c := &cluster{procs: &procSet{logDir: cfg.logDir}}
	// The nodes authenticate each other (peers refuse to start without
	// credentials): one fresh secret per cluster.
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	var https []string
	for i := range n {
		g, h, gossip := addr(ports[3*i]), addr(ports[3*i+1]), addr(ports[3*i+2])
		seeds := ""
		if i > 0 {
			seeds = addr(ports[2])
		}
		name := "node" + strconv.Itoa(i+1)
		args := []string{"--name", name, "--grpc-addr", g, "--http-addr", h, "--gossip-addr", gossip,
			"--gossip-profile", "local", "--seeds", seeds, "--rules", rulesPath,
			"--peer-secret", base64.StdEncoding.EncodeToString(secret)}
		pr, err := c.procs.start("ringlimit-"+name, cfg.nodeBin, args, cfg.env())
		if err != nil {
			c.stop()
			return nil, err
		}
		c.nodes, c.addrs, c.ids = append(c.nodes, pr), append(c.addrs, g), append(c.ids, name)
		https = append(https, h)
	}
	err = waitFor(ctx, c.procs, 30*time.Second, func(ctx context.Context) error {
		for _, h := range https {
			if err := ringlimitReady(ctx, h, n); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// ringlimitReady returns nil when the node at httpAddr is ready and its ring
// holds n members.
func ringlimitReady(ctx context.Context, httpAddr string, n int) error {
	var st struct {
		Ready   bool `json:"ready"`
		Members []struct {
			InRing bool `json:"in_ring"`
		} `json:"members"`
	}
	if err := getJSON(ctx, "http://"+httpAddr+"/v1/cluster", &st); err != nil {
		return err
	}
	in := 0
	for _, m := range st.Members {
		if m.InRing {
			in++
		}
	}
	if !st.Ready || in != n {
		return fmt.Errorf("%s: ready %v, %d of %d members in its ring", httpAddr, st.Ready, in, n)
	}
	return nil
}

// getJSON decodes the JSON answer of GET url into v.
func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// startGubernator starts n Gubernator daemons, discovering each other by
// memberlist, and waits until each counts n peers. Daemon i listens on a
// loopback address of its own, 127.0.0.(2+i): Gubernator's memberlist
// handler keys its peers by IP address alone, so daemons sharing one IP
// are taken for one peer.
func startGubernator(ctx context.Context, cfg *config, n int) (*cluster, error) {
	c := &cluster{procs: &procSet{logDir: cfg.logDir}}
	var seed string
	for i := range n {
		host := "127.0.0." + strconv.Itoa(2+i)
		ports, err := freePorts(host, 3)
		if err != nil {
			c.stop()
			return nil, err
		}
		g, h, ml := hostAddr(host, ports[0]), hostAddr(host, ports[1]), hostAddr(host, ports[2])
		if i == 0 {
			seed = ml
		}
		env := append(cfg.env(),
			"GUBER_GRPC_ADDRESS="+g, "GUBER_HTTP_ADDRESS="+h, "GUBER_ADVERTISE_ADDRESS="+g,
			"GUBER_PEER_DISCOVERY_TYPE=member-list", "GUBER_MEMBERLIST_ADDRESS="+ml, "GUBER_MEMBERLIST_BIND_ADDRESS="+ml,
			"GUBER_MEMBERLIST_KNOWN_NODES="+seed, "GUBER_INSTANCE_ID=gubernator"+strconv.Itoa(i+1))
		pr, err := c.procs.start("gubernator"+strconv.Itoa(i+1), cfg.self, []string{"-serve-gubernator"}, env)
		if err != nil {
			c.stop()
			return nil, err
		}
		c.nodes, c.addrs, c.ids = append(c.nodes, pr), append(c.addrs, g), append(c.ids, g)
	}
	cs, err := dial(c.addrs)
	if err != nil {
		c.stop()
		return nil, err
	}
	defer cs.close()
	err = waitFor(ctx, c.procs, 30*time.Second, func(ctx context.Context) error {
		for i, cc := range cs.cc {
			h, err := gubernator.NewV1Client(cc).HealthCheck(ctx, &gubernator.HealthCheckReq{})
			if err != nil {
				return err
			}
			if h.GetPeerCount() != int32(n) || h.GetStatus() != gubernator.Healthy {
				return fmt.Errorf("gubernator%d: %s, %d of %d peers", i+1, h.GetStatus(), h.GetPeerCount(), n)
			}
		}
		return nil
	})
	if err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// startLyft starts Redis and n instances of Lyft's ratelimit service in
// front of it, and waits until each answers its health check.
func startLyft(ctx context.Context, cfg *config, n int) (*cluster, error) {
	root := filepath.Join(cfg.logDir, "lyft-runtime")
	confDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	if err := os.WriteFile(filepath.Join(confDir, "bench.yaml"), []byte(lyftRules), 0o644); err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	ports, err := freePorts(loopback, 1+3*n)
	if err != nil {
		return nil, err
	}
	c := &cluster{procs: &procSet{logDir: cfg.logDir}}
	redisAddr := addr(ports[0])
	_, err = c.procs.start("redis", cfg.redisBin, []string{"--port", strconv.Itoa(ports[0]), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no"}, nil)
	if err != nil {
		return nil, err
	}
	if err := waitFor(ctx, c.procs, 20*time.Second, func(context.Context) error { return redisPing(redisAddr) }); err != nil {
		c.stop()
		return nil, err
	}
	var healths []string
	for i := range n {
		g, h, d := ports[1+3*i], ports[2+3*i], ports[3+3*i]
		env := append(cfg.env(), "USE_STATSD=false", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr,
			"REDIS_POOL_SIZE="+strconv.Itoa(cfg.redisPool),
			"HOST=127.0.0.1", "PORT="+strconv.Itoa(h), "GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(g),
			"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(d),
			"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false")
		pr, err := c.procs.start("lyft"+strconv.Itoa(i+1), cfg.lyftBin, nil, env)
		if err != nil {
			c.stop()
			return nil, err
		}
		c.nodes, c.addrs, c.ids = append(c.nodes, pr), append(c.addrs, addr(g)), append(c.ids, addr(g))
		healths = append(healths, "http://"+addr(h)+"/healthcheck")
	}
	err = waitFor(ctx, c.procs, 30*time.Second, func(ctx context.Context) error {
		for _, u := range healths {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", u, resp.Status)
			}
		}
		return nil
	})
	if err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// redisPing returns nil when Redis at a answers PING.
func redisPing(a string) error {
	cn, err := net.DialTimeout("tcp", a, time.Second)
	if err != nil {
		return err
	}
	defer cn.Close()
	_ = cn.SetDeadline(time.Now().Add(time.Second))
	if _, err := cn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(cn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redis %s: PING answered %q", a, line)
	}
	return nil
}
