//go:build e2e

package deploy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/client"
)

// TestComposeCluster brings the 3-node cluster of docker-compose.yml up on
// this host's Docker, waits until every node is ready and sees the other
// two, checks a key through all three, and takes the cluster down again.
// It skips without Docker or Compose (v2 plugin "docker compose", or v1
// "docker-compose"). The image is $RINGLIMIT_IMAGE when that exists (make
// e2e builds ringlimit:e2e), otherwise one built here from ../Dockerfile.
func TestComposeCluster(t *testing.T) {
	compose := composeCommand(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()

	image := testImage(ctx, t)
	ports := freePorts(t, 6)
	project := fmt.Sprintf("rlcompose%d", os.Getpid())
	env := append(os.Environ(),
		"RINGLIMIT_IMAGE="+image,
		"RINGLIMIT_BIND=127.0.0.1",
		"RINGLIMIT_NODE1_GRPC="+strconv.Itoa(ports[0]), "RINGLIMIT_NODE1_HTTP="+strconv.Itoa(ports[1]),
		"RINGLIMIT_NODE2_GRPC="+strconv.Itoa(ports[2]), "RINGLIMIT_NODE2_HTTP="+strconv.Itoa(ports[3]),
		"RINGLIMIT_NODE3_GRPC="+strconv.Itoa(ports[4]), "RINGLIMIT_NODE3_HTTP="+strconv.Itoa(ports[5]),
	)
	run := func(ctx context.Context, args ...string) ([]byte, error) {
		full := append(append(compose[1:len(compose):len(compose)], "-p", project, "-f", "docker-compose.yml"), args...)
		cmd := exec.CommandContext(ctx, compose[0], full...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			return out, fmt.Errorf("%v %v: %w\n%s", compose, args, err, out)
		}
		return out, nil
	}

	if _, err := run(ctx, "config", "-q"); err != nil {
		t.Fatalf("the compose file does not validate: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if t.Failed() {
			if out, err := run(ctx, "logs", "--no-color", "--tail", "50"); err == nil {
				t.Logf("logs:\n%s", out)
			}
		}
		if _, err := run(ctx, "down", "-v", "--timeout", "20"); err != nil {
			t.Errorf("down: %v", err)
		}
	})
	if _, err := run(ctx, "up", "-d", "--no-build"); err != nil {
		t.Fatal(err)
	}

	https := []string{addr(ports[1]), addr(ports[3]), addr(ports[5])}
	for _, h := range https {
		waitFor(ctx, t, "http://"+h+"/readyz ready and 3 members", func() error {
			if err := get(ctx, "http://"+h+"/readyz", nil); err != nil {
				return err
			}
			var st struct {
				Members []struct{ Name string } `json:"members"`
			}
			if err := get(ctx, "http://"+h+"/v1/cluster", &st); err != nil {
				return err
			}
			if len(st.Members) != 3 {
				return fmt.Errorf("members %v", st.Members)
			}
			return nil
		})
	}

	// Owner mode is exact: a limit of 2 admits exactly 2 of 4 hits sent
	// round-robin through the three nodes.
	c, err := client.Dial(ctx, []string{addr(ports[0]), addr(ports[2]), addr(ports[4])})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	it := client.Item{Name: "compose", Key: "alice", Hits: 1, Limit: 2, Period: time.Hour, Mode: check.ModeOwner}
	var admitted []bool
	for range 4 {
		res, err := c.Check(ctx, it)
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		admitted = append(admitted, res[0].Allowed())
	}
	if want := []bool{true, true, false, false}; fmt.Sprint(admitted) != fmt.Sprint(want) {
		t.Errorf("admitted %v, want %v", admitted, want)
	}
}

// composeCommand returns the Compose command line, or fails the test (make
// e2e installs Debian's docker-compose when no Compose is there).
func composeCommand(t *testing.T) []string {
	t.Helper()
	requireDocker(t)
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	if _, err := exec.LookPath("docker-compose"); err == nil {
		return []string{"docker-compose"}
	}
	t.Fatal("neither docker compose nor docker-compose is installed (make e2e installs docker-compose)")
	return nil
}
