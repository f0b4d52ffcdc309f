package deploy_test

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/ringlimit/ringlimit/internal/memlimit"
)

// memSize parses a memory size as the deployment files write it: bytes,
// or a whole number with a unit of Kubernetes (Ki, Mi, Gi), of Go's
// GOMEMLIMIT (KiB, MiB, GiB) or of Docker (k, m, g: binary as well).
func memSize(t *testing.T, where, s string) int64 {
	t.Helper()
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30},
		{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = num, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		t.Fatalf("%s: memory size %q: %v", where, s, err)
	}
	return n * mult
}

// nodeBase is the live heap a node needs beside its keys' charge, in
// bytes, that the budgets below provide for: its buffers, goroutines and
// calls in flight, and the queues between it and its peers and clients,
// which are bounded (peer.TransportConfig.MaxQueueBytes and
// peer.DriverConfig.MaxQueueBytes, 4 MiB encoded each, about 28 MiB of
// heap each when full; peer.DriverConfig.MaxQueueItems, about 8 MiB). 8 to
// 12 MiB a node were measured under a flood of new keys in process, 16 to
// 21 with calls timing out (docs/operations.md); the queues fill only when
// a node cannot keep up.
const nodeBase = 40 << 20

// checkBudget checks that a node limited to limit bytes of memory has
// GOMEMLIMIT set to between 80 and 90 % of it (the rest for the memory the
// runtime does not count against GOMEMLIMIT: the binary, thread stacks,
// pages freed and not yet returned), and a key budget
// (RINGLIMIT_MAX_KEY_BYTES) small enough that the soft limit the tuner
// asks for (memlimit.Limit: the keys with their margin, the node's base
// with its own, the slack) fits GOMEMLIMIT (issue 16: a flood of keys
// under the sidecar's limit killed nodes while GOMEMLIMIT was the
// container's limit and the key budget half of it).
func checkBudget(t *testing.T, where string, limit int64, env map[string]string) {
	t.Helper()
	g, ok := env["GOMEMLIMIT"]
	if !ok || g == "" {
		t.Errorf("%s: no GOMEMLIMIT of its own (from limits.memory it would be the whole limit): the runtime would not collect in time", where)
		return
	}
	goMem := memSize(t, where, g)
	if goMem*10 < limit*8 || goMem*10 > limit*9 {
		t.Errorf("%s: GOMEMLIMIT %s is %.0f %% of the memory limit (%d bytes), want 80 to 90 %%", where, g, 100*float64(goMem)/float64(limit), limit)
	}
	v, ok := env["RINGLIMIT_MAX_KEY_BYTES"]
	if !ok {
		t.Errorf("%s: no RINGLIMIT_MAX_KEY_BYTES: the keys' memory is not bounded to fit the limit", where)
		return
	}
	budget := memSize(t, where, v)
	if need := memlimit.Limit(budget, nodeBase, math.MaxInt64); need > goMem {
		t.Errorf("%s: RINGLIMIT_MAX_KEY_BYTES %s with a base of %d MiB asks for a soft limit of %d MiB, more than GOMEMLIMIT %s",
			where, v, nodeBase>>20, need>>20, g)
	}
}

// TestManifestsBudgetKeyMemory: every shipped deployment limits the node's
// memory and bounds its keys' memory to fit.
func TestManifestsBudgetKeyMemory(t *testing.T) {
	for _, f := range []struct{ file, workload string }{
		{filepath.Join("k8s", "ringlimit.yaml"), "ringlimit"},
		{filepath.Join("k8s", "sidecar.yaml"), "web"},
	} {
		m := loadManifest(t, f.file)
		c := ringlimitContainer(t, f.workload, m.workloads[f.workload])
		limit := memSize(t, f.file, c.Resources.Limits["memory"])
		checkBudget(t, f.file, limit, envOf(m, c))
	}

	raw, err := os.ReadFile("docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
			MemLimit    string            `yaml:"mem_limit"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatal(err)
	}
	for name, s := range compose.Services {
		if s.MemLimit == "" {
			t.Errorf("docker-compose.yml: %s has no mem_limit", name)
			continue
		}
		limit := memSize(t, name, s.MemLimit)
		checkBudget(t, "docker-compose.yml: "+name, limit, s.Environment)
	}
}
