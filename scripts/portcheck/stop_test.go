package main

import (
	"bufio"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// asFakeNode is asHelper's value that makes the test binary a stand-in for
// ringlimit-node under scripts/cluster.sh: it answers /readyz on its
// --http-addr, logs every SIGTERM to $FAKE_NODE_LOG, and exits only on the
// second one, as a real node stops at once on a second signal.
const asFakeNode = "node"

// fakeNode is the stand-in's main.
func fakeNode(args []string) int {
	logf, err := os.OpenFile(os.Getenv("FAKE_NODE_LOG"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 1
	}
	defer logf.Close()
	note := func(s string) { logf.WriteString(s + "\n") }
	var httpAddr string
	for i, a := range args {
		if a == "--http-addr" && i+1 < len(args) {
			httpAddr = args[i+1]
		}
	}
	terms := make(chan os.Signal, 2)
	signal.Notify(terms, syscall.SIGTERM)
	l, err := net.Listen("tcp", httpAddr)
	if err != nil {
		note("listen: " + err.Error())
		return 1
	}
	go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	note("pid " + strconv.Itoa(os.Getpid()))
	<-terms
	note("TERM")
	<-terms
	note("TERM")
	note("exit")
	return 0
}

// TestClusterSecondSignalStopsNodes runs scripts/cluster.sh with one
// stand-in node that shuts down slowly, and signals the script twice, as a
// user pressing Ctrl-C twice does. The second signal must reach the node
// (a second SIGTERM: stop at once) and the script must wait for it: no node
// may be left running, detached, once the script has returned. Before, the
// script reset its trap before signalling the nodes, so the second Ctrl-C
// killed it and left the node running.
func TestClusterSecondSignalStopsNodes(t *testing.T) {
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "node.log")
	node := filepath.Join(dir, "ringlimit-node")
	wrapper := "#!/bin/sh\nRINGLIMIT_PORTCHECK_TEST_HELPER=" + asFakeNode + " FAKE_NODE_LOG=" + log + " exec " + self + " \"$@\"\n"
	if err := os.WriteFile(node, []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	// PORT_BASE near a port the OS chose, with every port of node1 free
	// (gRPC, HTTP, gossip over TCP and UDP, peers).
	base := 0
	for range 20 {
		p := hold(t, "tcp") // held until the test ends; not a port of the cluster
		b := p + 7
		if b < 1024 || b+1001 > 65535 {
			continue
		}
		ok := true
		for _, port := range []struct {
			proto string
			n     int
		}{{"tcp", b + 1}, {"tcp", b + 1001}, {"tcp", b + 846}, {"udp", b + 846}, {"tcp", b + 101}} {
			if free(port.proto, net.JoinHostPort("127.0.0.1", strconv.Itoa(port.n))) != nil {
				ok = false
				break
			}
		}
		if ok {
			base = b
			break
		}
	}
	if base == 0 {
		t.Fatal("found no free PORT_BASE in 20 tries")
	}
	cmd := exec.Command("sh", "../cluster.sh", "1", node)
	cmd.Env = append(os.Environ(), asHelper+"=1", "PORTCHECK="+self,
		"PORT_BASE="+strconv.Itoa(base), "TMPDIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	done := make(chan error, 1)
	// nodePID, from the stand-in's log, so that a node left running is
	// stopped at the end whatever the outcome.
	nodePID := func() int {
		data, _ := os.ReadFile(log)
		for _, l := range strings.Split(string(data), "\n") {
			if p, ok := strings.CutPrefix(l, "pid "); ok {
				n, _ := strconv.Atoi(p)
				return n
			}
		}
		return 0
	}
	t.Cleanup(func() {
		if p := nodePID(); p > 0 {
			syscall.Kill(p, syscall.SIGKILL)
		}
		cmd.Process.Kill()
	})
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				data, _ := os.ReadFile(log)
				t.Fatalf("not within 20s: %s\nnode log:\n%s\nstderr:\n%s", what, data, stderr.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	var stdout []string
	waitFor("cluster.sh says the node is ready", func() bool {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("cluster.sh ended before the node was ready:\n%s\n%s", strings.Join(stdout, "\n"), stderr.String())
			}
			stdout = append(stdout, l)
			return strings.HasPrefix(l, "Press Ctrl-C")
		default:
			return false
		}
	})
	go func() {
		for range lines { // drain stdout so that the script never blocks on it
		}
		done <- cmd.Wait()
	}()
	terms := func() int {
		data, _ := os.ReadFile(log)
		return strings.Count(string(data), "TERM")
	}
	cmd.Process.Signal(syscall.SIGINT)
	waitFor("the node gets SIGTERM after the first Ctrl-C", func() bool { return terms() >= 1 })
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("cluster.sh did not end within 20s of the second Ctrl-C; stderr:\n%s", stderr.String())
	}
	data, _ := os.ReadFile(log)
	if got := strings.Count(string(data), "TERM"); got != 2 || !strings.Contains(string(data), "exit") {
		t.Errorf("cluster.sh returned with its node given %d SIGTERMs and not stopped (want 2, then exit): a node left running; node log:\n%s", got, data)
	}
}
