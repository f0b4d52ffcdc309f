//go:build e2e

package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// requireDocker fails the test unless a Docker daemon answers: these tests
// run only with the e2e build tag, which asks for real containers (make e2e
// checks the daemon first), so a missing one is a failure, not a skip.
func requireDocker(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		t.Fatal("docker is not installed (make e2e needs a Docker engine)")
	}
	if err := exec.Command("docker", "info").Run(); err != nil {
		t.Fatalf("docker is installed but its daemon does not answer: %v", err)
	}
}

// docker runs the docker command with args and returns its output.
func docker(ctx context.Context, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("docker %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// testImage returns $RINGLIMIT_IMAGE if Docker has it, or builds the node
// and the repository's Dockerfile into ringlimit:deploy-e2e.
func testImage(ctx context.Context, t *testing.T) string {
	t.Helper()
	if img := os.Getenv("RINGLIMIT_IMAGE"); img != "" {
		if exec.CommandContext(ctx, "docker", "image", "inspect", img).Run() == nil {
			return img
		}
		t.Logf("RINGLIMIT_IMAGE=%s does not exist; building an image", img)
	}
	const img = "ringlimit:deploy-e2e"
	dir := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, "ringlimit-node"), "../cmd/node")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if out, err := exec.CommandContext(ctx, "docker", "build", "-q", "-f", "../Dockerfile", "-t", img, dir).CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	return img
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

func addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// get fetches url and, when into is not nil, decodes its JSON body into it.
func get(ctx context.Context, url string, into any) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %s", url, resp.Status, body.String())
	}
	if into != nil {
		return json.Unmarshal(body.Bytes(), into)
	}
	return nil
}

// waitFor polls cond until it returns nil, failing the test when ctx ends
// or a minute passes: containers start on their own time.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (last: %v)", what, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// cliImage builds an image holding only the command-line client,
// ringlimit-cli:deploy-e2e, whose entry point is /ringlimit: run in a
// container's network namespace, it reaches that container's loopback.
func cliImage(ctx context.Context, t *testing.T) string {
	t.Helper()
	const img = "ringlimit-cli:deploy-e2e"
	dir := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", filepath.Join(dir, "ringlimit"), "../cmd/ringlimit")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	df := "FROM scratch\nCOPY ringlimit /ringlimit\nENTRYPOINT [\"/ringlimit\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, "docker", "build", "-q", "-t", img, dir).CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	return img
}
