//go:build e2e

// Package nginx_test puts Debian's nginx in front of a small upstream, with
// auth_request to a 3-node ringlimit cluster (in-process, on loopback) as
// docs/middleware.md configures it, and shows that two nginx server blocks
// served by two worker processes share one limit per client: N requests
// admitted, then 429 with Retry-After and the RateLimit-* headers. With the
// cluster gone, the fail-open variant lets requests through.
//
// It needs the nginx binary (Debian's nginx package, built with
// --with-http_auth_request_module):
//
//	command -v nginx || apt-get install -y nginx
//	go test -tags e2e -count=1 -v ./e2e/nginx/
//
// nginx runs in the foreground on 127.0.0.1 with a configuration, logs and
// temporary files of its own in the test's temporary directory, in a process
// group of its own, which the test ends (by that id) when it finishes,
// passed or failed.
package nginx_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

// limit is the shared limit of the rule: per client address, per hour, so
// that no token comes back while the test runs.
const limit = 5

const rulesYAML = `domain: nginx
descriptors:
  - key: per_ip
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: token_bucket, mode: owner}
`

// nginxConf is docs/middleware.md's configuration, twice: two server
// blocks on two ports, run by two worker processes. The %[n] verbs are
// filled by writeNginxConf.
const nginxConf = `# Written by e2e/nginx; see docs/middleware.md.
%[1]s
worker_processes 2;
daemon off;
master_process on;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log info;

events {
    worker_connections 64;
}

http {
    log_format worker '$pid $server_port $status';
    access_log %[2]s/access.log worker;
    client_body_temp_path %[2]s/client_body;
    proxy_temp_path %[2]s/proxy;
    fastcgi_temp_path %[2]s/fastcgi;
    uwsgi_temp_path %[2]s/uwsgi;
    scgi_temp_path %[2]s/scgi;

    upstream ringlimit {
%[3]s        keepalive 16;
    }

    upstream app {
        server %[4]s;
    }

%[5]s
}
`

// serverBlock is one server block of docs/middleware.md's configuration;
// its client key is the nginx variable %[3]s ($remote_addr there).
const serverBlock = `    server {
        listen %[1]s;

        location / {
            auth_request     /_ratelimit;
            auth_request_set $rl_status    $upstream_status;
            auth_request_set $rl_limit     $upstream_http_ratelimit_limit;
            auth_request_set $rl_remaining $upstream_http_ratelimit_remaining;
            auth_request_set $rl_reset     $upstream_http_ratelimit_reset;
            auth_request_set $rl_retry     $upstream_http_retry_after;

            add_header RateLimit-Limit     $rl_limit always;
            add_header RateLimit-Remaining $rl_remaining always;
            add_header RateLimit-Reset     $rl_reset always;
            add_header X-Server-Block      %[2]s always;

            error_page 500 = @ratelimit_error;
            proxy_pass http://app;
        }

        location = /_ratelimit {
            internal;
            proxy_pass              http://ringlimit/v1/nginx/auth;
            proxy_pass_request_body off;
            proxy_set_header        Content-Length "";
            proxy_set_header        X-Real-IP %[3]s;
            proxy_set_header        X-Ringlimit-Rule nginx/per_ip;
            proxy_set_header        X-Original-URI $request_uri;
            proxy_http_version      1.1;
            proxy_set_header        Connection "";
            proxy_connect_timeout   100ms;
            proxy_read_timeout      500ms;
        }

        location @ratelimit_error {
            if ($rl_status ~ "429$") {
                add_header RateLimit-Limit     $rl_limit always;
                add_header RateLimit-Remaining $rl_remaining always;
                add_header RateLimit-Reset     $rl_reset always;
                add_header Retry-After         $rl_retry always;
                return 429;
            }
            proxy_pass http://app;
        }
    }
`

func TestNginxSharesOneLimitAcrossServerBlocks(t *testing.T) {
	bin := nginxBinary(t)
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte(rulesYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	nodes := startCluster(t, 3, rules)
	app := startUpstream(t)
	ports := freePorts(t, 2)
	var httpAddrs []string
	for _, n := range nodes {
		httpAddrs = append(httpAddrs, n.HTTPAddr())
	}
	conf := writeNginxConf(t, dir, httpAddrs, app, ports, []string{"$remote_addr", "$remote_addr"})
	startNginx(t, bin, dir, conf, ports)

	// Requests alternate between the two server blocks; nginx spreads them
	// over its two workers, and each worker its subrequests over the three
	// nodes.
	type answer struct {
		block, status                          string
		limit, remaining, reset, retry, server string
	}
	var got []answer
	for i := range 2*limit + 2 {
		resp, body := get(t, "http://"+ports[i%2]+"/hello")
		a := answer{block: ports[i%2], status: resp.Status, limit: resp.Header.Get("RateLimit-Limit"),
			remaining: resp.Header.Get("RateLimit-Remaining"), reset: resp.Header.Get("RateLimit-Reset"),
			retry: resp.Header.Get("Retry-After"), server: resp.Header.Get("X-Server-Block")}
		t.Logf("request %2d via %s: %s limit=%s remaining=%s reset=%s retry-after=%s", i+1, a.block, a.status,
			a.limit, a.remaining, a.reset, a.retry)
		got = append(got, a)
		if resp.StatusCode == http.StatusOK && body != "hello from upstream\n" {
			t.Errorf("request %d: body %q, want the upstream's", i+1, body)
		}
	}
	for i, a := range got {
		if i < limit {
			if a.status != "200 OK" || a.limit != strconv.Itoa(limit) || a.remaining != strconv.Itoa(limit-1-i) || a.retry != "" {
				t.Errorf("request %d: %+v, want 200 with limit %d, remaining %d, no Retry-After", i+1, a, limit, limit-1-i)
			}
			continue
		}
		retry, err := strconv.Atoi(a.retry)
		if a.status != "429 Too Many Requests" || a.limit != strconv.Itoa(limit) || a.remaining != "0" || err != nil || retry <= 0 {
			t.Errorf("request %d: %+v, want 429 with limit %d, remaining 0 and a positive Retry-After", i+1, a, limit)
		}
	}
	if t.Failed() {
		dumpLog(t, dir)
	}

	// Every answer came from the cluster: the nodes' decisions add up to
	// the requests.
	var decided float64
	var spread []string
	for _, n := range nodes {
		d := decisions(t, n)
		decided += d
		spread = append(spread, fmt.Sprintf("%s=%v", n.Name(), d))
	}
	t.Logf("decisions per node: %s", strings.Join(spread, " "))
	if int(decided) != len(got) {
		t.Errorf("the nodes decided %v items, want %d (one per request)", decided, len(got))
	}
	t.Logf("nginx access log (worker pid, port, status):\n%s", readFile(t, filepath.Join(dir, "access.log")))

	// With the cluster gone, the fail-open variant passes requests on.
	for _, n := range nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := n.Shutdown(ctx); err != nil {
			t.Errorf("shutdown %s: %v", n.Name(), err)
		}
		cancel()
	}
	for i := range 2 {
		resp, body := get(t, "http://"+ports[i]+"/hello")
		if resp.StatusCode != http.StatusOK || body != "hello from upstream\n" {
			t.Errorf("cluster down, via %s: %s %q, want 200 from the upstream (fail open)", ports[i], resp.Status, body)
		}
	}
	if t.Failed() {
		dumpLog(t, dir)
	}
}

// TestNginxBadKeysDenied: behind a server block keyed by a header the client
// sends (X-Api-Key), a request without it or with a key of 2000 bytes is
// denied with 403 (issue 16: 204 for 20 of 20), counted by the node; a
// request with a good key passes.
func TestNginxBadKeysDenied(t *testing.T) {
	bin := nginxBinary(t)
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte(rulesYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	nodes := startCluster(t, 1, rules)
	app := startUpstream(t)
	ports := freePorts(t, 1)
	conf := writeNginxConf(t, dir, []string{nodes[0].HTTPAddr()}, app, ports, []string{"$http_x_api_key"})
	startNginx(t, bin, dir, conf, ports)
	url := "http://" + ports[0] + "/hello"
	for _, key := range []string{"", strings.Repeat("k", 2000)} {
		for i := range 10 {
			resp, _ := getWith(t, url, "X-Api-Key", key)
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("key of %d bytes, request %d: %s, want 403", len(key), i+1, resp.Status)
			}
		}
	}
	if resp, body := getWith(t, url, "X-Api-Key", "alice"); resp.StatusCode != http.StatusOK || body != "hello from upstream\n" {
		t.Errorf("a good key: %s %q, want 200 from the upstream", resp.Status, body)
	}
	if got := metric(t, nodes[0], `ringlimit_bad_keys_total{front="nginx"}`); got != 20 {
		t.Errorf("bad keys counted %v, want 20", got)
	}
	if t.Failed() {
		dumpLog(t, dir)
	}
}

// nginxBinary returns the path of nginx, or fails saying how to install it.
func nginxBinary(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"nginx", "/usr/sbin/nginx"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Fatal("nginx not found: install Debian's nginx (apt-get install -y nginx); make e2e does")
	return ""
}

// startCluster starts size nodes on loopback with the rules file, the first
// the seed, and waits until every node sees all of them.
func startCluster(t *testing.T, size int, rules string) []*ringlimit.Node {
	t.Helper()
	var nodes []*ringlimit.Node
	for i := range size {
		cfg := ringlimit.DefaultConfig()
		cfg.Name = fmt.Sprintf("n%d", i+1)
		cfg.API.GRPCAddr, cfg.API.HTTPAddr, cfg.Gossip.Addr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
		cfg.Gossip.Profile = ringlimit.GossipLocal
		cfg.Rules.Path = rules
		cfg.Peer.Secret = []byte("ringlimit test cluster secret, 32")
		cfg.Shutdown.HandoffTimeout, cfg.Shutdown.LeaveTimeout = 2*time.Second, time.Second
		if testing.Verbose() {
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
		if i > 0 {
			cfg.Gossip.Seeds = []string{nodes[0].GossipAddr()}
		}
		n, err := ringlimit.Start(t.Context(), cfg)
		if err != nil {
			t.Fatalf("starting %s: %v", cfg.Name, err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = n.Shutdown(ctx) // a second Shutdown returns the first's result
		})
		nodes = append(nodes, n)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		joined := 0
		for _, n := range nodes {
			if n.Ready() && len(n.Members()) == size {
				joined++
			}
		}
		if joined == size {
			return nodes
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster did not form within 15s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startUpstream serves "hello from upstream" on 127.0.0.1 until the test
// ends, and returns its address.
func startUpstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, "hello from upstream\n")
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// freePorts returns n addresses 127.0.0.1:port whose ports the OS had
// free a moment ago (nginx must be told its ports).
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var lns []net.Listener
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

// writeNginxConf writes the configuration to dir and returns its path.
// keys gives the client key of each block of listen (an nginx variable).
func writeNginxConf(t *testing.T, dir string, nodes []string, app string, listen, keys []string) string {
	t.Helper()
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;" // the workers may then write to dir
	}
	var servers, blocks strings.Builder
	for _, a := range nodes {
		fmt.Fprintf(&servers, "        server %s;\n", a)
	}
	for i, l := range listen {
		fmt.Fprintf(&blocks, serverBlock, l, fmt.Sprintf("block%d", i+1), keys[i])
	}
	conf := fmt.Sprintf(nginxConf, user, dir, servers.String(), app, blocks.String())
	p := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(p, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// startNginx checks conf, starts nginx in the foreground in a process group
// of its own, waits until it accepts on every port, and ends the group
// when the test ends.
func startNginx(t *testing.T, bin, dir, conf string, ports []string) {
	t.Helper()
	out, err := exec.Command(bin, "-t", "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", conf).CombinedOutput()
	if err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	var stderr strings.Builder
	cmd := exec.Command(bin, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", conf)
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid // the group of the master and its workers
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-pgid, syscall.SIGQUIT) // graceful: workers finish their requests
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			t.Logf("nginx did not stop on SIGQUIT within 5s: killing its process group %d", pgid)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-exited
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL) // any worker left behind; ESRCH when none
	})
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range ports {
		for {
			c, err := net.DialTimeout("tcp", p, 100*time.Millisecond)
			if err == nil {
				c.Close()
				break
			}
			select {
			case err := <-exited:
				t.Fatalf("nginx exited: %v\n%s", err, stderr.String())
			default:
			}
			if time.Now().After(deadline) {
				dumpLog(t, dir)
				t.Fatalf("nginx does not accept on %s within 10s", p)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// get sends a GET and returns the response (body closed) and its body.
func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	return getWith(t, url, "", "")
}

// getWith is get with the header name set to value (unless name or value
// is empty).
func getWith(t *testing.T, url, name, value string) (*http.Response, string) {
	t.Helper()
	// A new connection per request, so that the kernel may hand each to
	// either nginx worker.
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if name != "" && value != "" {
		req.Header.Set(name, value)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// decisions returns the items the node answered, from its /metrics.
func decisions(t *testing.T, n *ringlimit.Node) float64 {
	t.Helper()
	_, body := get(t, "http://"+n.HTTPAddr()+"/metrics")
	var sum float64
	for line := range strings.Lines(body) {
		if !strings.HasPrefix(line, "ringlimit_decisions_total{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// metric returns the value of the series (name and labels as exposed) on
// n's /metrics, or 0 if absent.
func metric(t *testing.T, n *ringlimit.Node, series string) float64 {
	t.Helper()
	_, body := get(t, "http://"+n.HTTPAddr()+"/metrics")
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metrics line %q: %v", line, err)
			}
			return f
		}
	}
	return 0
}

// dumpLog logs nginx's error log.
func dumpLog(t *testing.T, dir string) {
	t.Helper()
	t.Logf("nginx error log:\n%s", readFile(t, filepath.Join(dir, "error.log")))
}

// readFile returns the content of path, or why it cannot be read.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
