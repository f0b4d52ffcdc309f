package deploy_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
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

// checkBudget checks that a node limited to limit bytes of memory has
// GOMEMLIMIT set and a key budget (RINGLIMIT_MAX_KEY_BYTES) of at most half
// of it: the keys' half, the rest for the node's base and the collector
// (issue 16: a flood of keys under the sidecar's limit killed 2 nodes of 3
// when nothing bounded their memory but a count of keys).
func checkBudget(t *testing.T, where string, limit int64, env map[string]string, goMemLimitSet bool) {
	t.Helper()
	if !goMemLimitSet {
		t.Errorf("%s: no GOMEMLIMIT: the runtime would not collect before the limit", where)
	}
	v, ok := env["RINGLIMIT_MAX_KEY_BYTES"]
	if !ok {
		t.Errorf("%s: no RINGLIMIT_MAX_KEY_BYTES: the keys' memory is not bounded to fit the limit", where)
		return
	}
	if budget := memSize(t, where, v); budget > limit/2 {
		t.Errorf("%s: RINGLIMIT_MAX_KEY_BYTES %s is more than half the memory limit (%d bytes)", where, v, limit)
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
		goMem := false
		for _, e := range c.Env {
			if e.Name == "GOMEMLIMIT" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil &&
				e.ValueFrom.ResourceFieldRef.Resource == "limits.memory" {
				goMem = true
			}
		}
		checkBudget(t, f.file, limit, envOf(m, c), goMem)
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
		g, ok := s.Environment["GOMEMLIMIT"]
		checkBudget(t, "docker-compose.yml: "+name, limit, s.Environment, ok && memSize(t, name, g) <= limit)
	}
}
