package conformance

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// startRedis starts redis-server on a free loopback port, without
// persistence, and stops it (by its PID) when the test ends. It returns
// the address.
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found (make conformance installs Debian's redis-server): %v", err)
	}
	var lastErr error
	for try := 0; try < 5; try++ { // another process may take the port between the probe and the bind
		port := freePort(t)
		cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
			"--save", "", "--appendonly", "no")
		dieWithParent(cmd)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		stop := func() {
			_ = cmd.Process.Kill()
			<-exited
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if lastErr = waitPing(addr, exited); lastErr == nil {
			t.Cleanup(stop)
			return addr
		}
		stop()
	}
	t.Fatalf("redis-server did not start: %v", lastErr)
	return ""
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitPing waits up to 10 s for redis at addr to answer PING, or for the
// process to exit (its Wait result then comes on exited, and is put back).
func waitPing(addr string, exited chan error) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("redis-server exited: %v", err)
		default:
		}
		if err := ping(addr); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond) // polling an external process's start-up, bounded above
	}
	return fmt.Errorf("no answer from %s within 10s", addr)
}

// ping sends PING to redis at addr and reads +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}
