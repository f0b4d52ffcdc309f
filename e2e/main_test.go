//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// image is the tag of the node's image that TestMain builds.
const image = "ringlimit:e2e"

// imageID is the ID of the image this test binary built: containers are
// created from it, not from the tag, so that another run building the tag
// meanwhile (another checkout's make e2e or make flood) cannot swap the
// binary under this one.
var imageID = image

// runLabel labels every container and network this test binary creates; its
// value is runID.
const runLabel = "ringlimit.e2e.run"

// runID tells this run's containers and networks from any other's. It is set
// once by TestMain, before any test runs.
var runID string

// helperMains are programs this test binary runs instead of its tests when
// their environment variable (the key) is set: a test starts the binary
// again as a process of its own, with the variable set to the program's
// argument.
var helperMains = map[string]func(arg string) int{}

func TestMain(m *testing.M) {
	for env, main := range helperMains {
		if arg := os.Getenv(env); arg != "" {
			os.Exit(main(arg))
		}
	}
	os.Exit(mainE2E(m))
}

// mainE2E checks Docker, builds the image, runs the tests and removes
// whatever they left behind (which fails the run: every test cleans up after
// itself).
func mainE2E(m *testing.M) int {
	flag.Parse()
	ctx := context.Background()
	if v, err := docker(ctx, "version", "--format", "{{.Server.Version}}"); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: FAIL: the Docker daemon is unreachable (these tests need it): %v\n", err)
		return 1
	} else {
		fmt.Printf("e2e: Docker server %s\n", v)
	}
	runID = randomHex(4)
	start := time.Now()
	if err := buildImage(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: FAIL: building %s: %v\n", image, err)
		return 1
	}
	fmt.Printf("e2e: built %s in %v; run %s\n", image, time.Since(start).Round(time.Millisecond), runID)

	// An interrupt, or go test's -timeout (whose panic skips every
	// t.Cleanup), would leave containers running: remove them first.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		if _, ok := <-sig; ok {
			fmt.Fprintln(os.Stderr, "e2e: interrupted; removing this run's containers and networks")
			sweep()
			os.Exit(2)
		}
	}()
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil && d > time.Minute {
			time.AfterFunc(d-30*time.Second, func() {
				fmt.Fprintln(os.Stderr, "e2e: -timeout is near; removing this run's containers and networks")
				sweep()
			})
		}
	}

	code := m.Run()
	signal.Stop(sig)
	if n := sweep(); n > 0 {
		fmt.Fprintf(os.Stderr, "e2e: FAIL: %d containers or networks were left behind and removed now\n", n)
		code = 1
	}
	return code
}

// buildImage builds the node with CGO_ENABLED=0, checks that it is statically
// linked, and builds the image from ../Dockerfile with the binary as the
// whole context.
func buildImage(ctx context.Context) error {
	root, err := filepath.Abs("..")
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return fmt.Errorf("module root: %w", err)
	}
	dir, err := os.MkdirTemp("", "ringlimit-e2e-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "ringlimit-node")
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(), "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./cmd/node")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/node: %w\n%s", err, out)
	}
	if err := checkStatic(bin); err != nil {
		return err
	}
	old, _ := docker(ctx, "image", "inspect", "--format", "{{.Id}}", image)
	id, err := docker(ctx, "build", "-q", "-f", filepath.Join(root, "Dockerfile"), "-t", image, dir)
	if err != nil {
		return err
	}
	imageID = id
	if old != "" && old != id {
		_, _ = docker(ctx, "image", "rm", old) // the previous build, now untagged
	}
	return nil
}

// checkStatic fails when bin asks for a dynamic loader: FROM scratch has
// none.
func checkStatic(bin string) error {
	f, err := elf.Open(bin)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; the scratch image needs a static binary", bin)
		}
	}
	return nil
}

// goTool returns the go command: the one on PATH, or the one of the
// toolchain that built this test.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// dockerTimeout bounds every docker command.
const dockerTimeout = 2 * time.Minute

// docker runs the docker CLI and returns its standard output, trimmed. The
// error carries the command and its standard error.
func docker(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, dockerTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", &dockerError{args: args, err: err, stderr: strings.TrimSpace(stderr.String())}
	}
	return strings.TrimSpace(stdout.String()), nil
}

// dockerError is a docker command that failed.
type dockerError struct {
	args   []string
	err    error
	stderr string
}

func (e *dockerError) Error() string {
	return fmt.Sprintf("docker %s: %v: %s", strings.Join(e.args, " "), e.err, e.stderr)
}

func (e *dockerError) Unwrap() error { return e.err }

// overlaps reports whether err is Docker refusing a subnet that overlaps
// another network's.
func overlaps(err error) bool {
	var de *dockerError
	return errors.As(err, &de) && strings.Contains(strings.ToLower(de.stderr), "overlap")
}

// sweep removes every container and network labelled with this run, and
// returns how many there were.
func sweep() int {
	ctx := context.Background()
	n := 0
	filter := "label=" + runLabel + "=" + runID
	if ids, err := docker(ctx, "ps", "-aq", "--filter", filter); err == nil && ids != "" {
		f := strings.Fields(ids)
		n += len(f)
		_, _ = docker(ctx, append([]string{"rm", "-f"}, f...)...)
	}
	if ids, err := docker(ctx, "network", "ls", "-q", "--filter", filter); err == nil && ids != "" {
		f := strings.Fields(ids)
		n += len(f)
		_, _ = docker(ctx, append([]string{"network", "rm"}, f...)...)
	}
	return n
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b)
}
