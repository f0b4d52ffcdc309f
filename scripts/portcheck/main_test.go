package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// asHelper, set in the environment, makes the test binary run as portcheck
// itself: scripts/cluster.sh calls it so.
const asHelper = "RINGLIMIT_PORTCHECK_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(asHelper) == "1" {
		os.Exit(run(os.Args[1:], os.Stderr))
	}
	if os.Getenv(asHelper) == asFakeNode {
		os.Exit(fakeNode(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// hold listens on a loopback port chosen by the OS until the test ends.
func hold(t *testing.T, proto string) int {
	t.Helper()
	var addr net.Addr
	if proto == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		addr = c.LocalAddr()
	} else {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		addr = l.Addr()
	}
	_, p, _ := net.SplitHostPort(addr.String())
	n, _ := strconv.Atoi(p)
	return n
}

func TestRun(t *testing.T) {
	tcp, udp := hold(t, "tcp"), hold(t, "udp")
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"tcp taken", []string{"127.0.0.1", "tcp:" + strconv.Itoa(tcp)}, 1, "tcp 127.0.0.1:" + strconv.Itoa(tcp) + " is taken"},
		{"udp taken", []string{"127.0.0.1", "udp:" + strconv.Itoa(udp)}, 1, "udp 127.0.0.1:" + strconv.Itoa(udp) + " is taken"},
		// The TCP port of the UDP socket held is free for TCP (and the
		// other way round) unless something else holds it.
		{"no proto", []string{"127.0.0.1", strconv.Itoa(tcp)}, 2, "want tcp:PORT or udp:PORT"},
		{"bad port", []string{"127.0.0.1", "tcp:70000"}, 2, "want tcp:PORT or udp:PORT"},
		{"no port", []string{"127.0.0.1"}, 2, "usage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var errs bytes.Buffer
			if got := run(tt.args, &errs); got != tt.wantCode || !strings.Contains(errs.String(), tt.wantErr) {
				t.Errorf("run(%q) = %d, %q; want %d, %q", tt.args, got, errs.String(), tt.wantCode, tt.wantErr)
			}
		})
	}
}

func TestRunFreePort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var errs bytes.Buffer
	if got := run([]string{"127.0.0.1", "tcp:" + strconv.Itoa(port)}, &errs); got != 0 {
		t.Errorf("a port just released: exit %d, %q; want 0", got, errs.String())
	}
}

// holdInCluster holds a port chosen by the OS and returns it with the
// PORT_BASE that puts it at offset in a 2-node cluster whose other ports
// are free (the machine may be running other clusters: then it tries
// another port).
func holdInCluster(t *testing.T, proto string, offset int) (port, base int) {
	t.Helper()
	for range 20 {
		port = hold(t, proto)
		base = port - offset
		if base < 1024 || base > 64485 {
			continue
		}
		others := true
		for i := 1; i <= 2 && others; i++ {
			for _, p := range []struct {
				proto string
				port  int
			}{{"tcp", base + i}, {"tcp", base + 1000 + i}, {"tcp", base + 845 + i}, {"udp", base + 845 + i}, {"tcp", base + 100 + i}} {
				if p.port == port && p.proto == proto {
					continue
				}
				if free(p.proto, net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port))) != nil {
					others = false
					break
				}
			}
		}
		if others {
			return port, base
		}
	}
	t.Fatalf("found no PORT_BASE whose cluster's ports are free but for the one held, in 20 tries")
	return 0, 0
}

// TestClusterRefusesTakenPort runs scripts/cluster.sh (make run's launcher)
// with one of its ports held, for each kind of port: it must exit 2 before
// starting any node, name the port and say how to choose other ports.
func TestClusterRefusesTakenPort(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Fatal("scripts/cluster.sh needs sh:", err)
	}
	tests := []struct {
		name   string
		proto  string
		offset int // of the held port from PORT_BASE, for node 2 of 2
	}{
		{"gRPC", "tcp", 2},
		{"HTTP", "tcp", 1002},
		{"gossip TCP", "tcp", 847},
		{"gossip UDP", "udp", 847},
		{"peers", "tcp", 102},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			port, base := holdInCluster(t, tt.proto, tt.offset)
			// A stand-in node that leaves a mark if it is ever started.
			marker := filepath.Join(dir, "started")
			node := filepath.Join(dir, "ringlimit-node")
			if err := os.WriteFile(node, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("sh", "../cluster.sh", "2", node)
			cmd.Env = append(os.Environ(), asHelper+"=1", "PORTCHECK="+self,
				"PORT_BASE="+strconv.Itoa(base), "TMPDIR="+dir)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err = cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Fatalf("cluster.sh: %v, want exit status 2\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
			}
			for _, want := range []string{
				tt.proto + " 127.0.0.1:" + strconv.Itoa(port) + " is taken",
				"no node was started",
				"make run PORT_BASE=",
			} {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
				}
			}
			if _, err := os.Stat(marker); err == nil {
				t.Error("a node was started")
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout: %q, want nothing (no readiness claimed)", stdout.String())
			}
		})
	}
}
