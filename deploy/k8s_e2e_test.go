//go:build e2e

package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

// TestKubernetesPodsOnDocker runs the pods of the Kubernetes manifests as
// Docker containers, with the ringlimit container's environment taken from
// the manifest as is, and the headless Service played by a network alias
// (Docker's DNS then resolves the Service's name to every container, as
// cluster DNS does for a headless Service that publishes not-ready pods).
// The StatefulSet's pods start one at a time, each once the one before is
// ready (OrderedReady); the sidecars start all at once, as a Deployment's.
// Every node must see the three, and an owner-mode limit must be exact
// through all three. It checks what a cluster would run, short of the
// kubelet: the probes and Services' ports are checked by
// TestKubernetesStatefulSet and TestKubernetesSidecar.
func TestKubernetesPodsOnDocker(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	image := testImage(ctx, t)
	cli := cliImage(ctx, t)

	for _, tc := range []struct {
		file, workload string
		ordered        bool
	}{
		{"ringlimit.yaml", "ringlimit", true},
		{"sidecar.yaml", "web", false},
	} {
		t.Run(tc.workload, func(t *testing.T) {
			m := loadManifest(t, filepath.Join("k8s", tc.file))
			w := m.workloads[tc.workload]
			c := ringlimitContainer(t, tc.workload, w)
			p := newPods(ctx, t, image, cli, m, w)
			var names []string
			var wg sync.WaitGroup
			for i := range 3 {
				name := fmt.Sprintf("%s-%d", tc.workload, i)
				names = append(names, name)
				if tc.ordered {
					p.start(name, c)
					p.waitReady(name, i+1)
					continue
				}
				wg.Go(func() { p.start(name, c) })
			}
			wg.Wait()
			for _, name := range names {
				p.waitMembers(name, names)
			}

			grpc := loopback(envOf(m, c)["RINGLIMIT_GRPC_ADDR"])
			var got []string
			for _, name := range append(names, names[0]) {
				got = append(got, p.check(name, grpc))
			}
			if want := "under_limit under_limit over_limit over_limit"; strings.Join(got, " ") != want {
				t.Errorf("owner mode, limit 2, through %v: %v, want %s", names, got, want)
			}
		})
	}
}

// pods runs one workload's pods as containers on a network of their own.
type pods struct {
	ctx        context.Context
	t          *testing.T
	image, cli string
	prefix     string                       // of container and network names
	aliases    []string                     // the headless Services selecting the pods
	http       string                       // the HTTP API's address inside a pod
	secrets    map[string]map[string]string // the manifest's Secrets

	mu struct {
		sync.Mutex
		started []string // containers, to remove
	}
}

func newPods(ctx context.Context, t *testing.T, image, cli string, m manifest, w workloadSpec) *pods {
	p := &pods{ctx: ctx, t: t, image: image, cli: cli,
		prefix: fmt.Sprintf("rlk8s%d-%s", os.Getpid(), strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))),
		http:   loopback(envOf(m, ringlimitContainer(t, "pods", w))["RINGLIMIT_HTTP_ADDR"]), secrets: m.secrets}
	for name, svc := range m.services {
		if svc.ClusterIP == "None" && selects(svc.Selector, w.Template.Metadata.Labels) {
			p.aliases = append(p.aliases, name)
		}
	}
	if len(p.aliases) == 0 {
		t.Fatal("no headless Service selects the pods")
	}
	if _, err := docker(ctx, "network", "create", p.prefix); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.remove)
	return p
}

// start runs pod name's ringlimit container with the manifest's
// environment: a field reference to metadata.name is the pod's name, a
// Secret's key its value, a resource reference (GOMEMLIMIT) is left out.
func (p *pods) start(name string, c container) {
	args := []string{"run", "-d", "--name", p.prefix + "-" + name, "--hostname", name, "--network", p.prefix}
	for _, a := range p.aliases {
		args = append(args, "--network-alias", a)
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			args = append(args, "-e", e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			args = append(args, "-e", e.Name+"="+name)
		case e.ValueFrom.SecretKeyRef != nil:
			args = append(args, "-e", e.Name+"="+p.secrets[e.ValueFrom.SecretKeyRef.Name][e.ValueFrom.SecretKeyRef.Key])
		}
	}
	args = append(args, p.image)
	p.mu.Lock()
	p.mu.started = append(p.mu.started, p.prefix+"-"+name)
	p.mu.Unlock()
	if _, err := docker(p.ctx, args...); err != nil {
		p.t.Error(err)
	}
}

// cliRun runs the command-line client in pod name's network namespace.
func (p *pods) cliRun(name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	return docker(ctx, append([]string{"run", "--rm", "--network", "container:" + p.prefix + "-" + name, p.cli}, args...)...)
}

// status returns pod name's view of the cluster.
func (p *pods) status(name string) (ringlimit.ClusterStatus, error) {
	var st ringlimit.ClusterStatus
	out, err := p.cliRun(name, "cluster", "--http", p.http, "--json", "--timeout", "2s")
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(out, &st)
}

// waitReady waits until pod name is ready and sees members members.
func (p *pods) waitReady(name string, members int) {
	p.t.Helper()
	waitFor(p.ctx, p.t, name+" ready", func() error {
		st, err := p.status(name)
		switch {
		case err != nil:
			return err
		case !st.Ready || len(st.Members) != members:
			return fmt.Errorf("ready %v, members %v", st.Ready, st.Members)
		}
		return nil
	})
}

// waitMembers waits until pod name is ready and sees exactly names.
func (p *pods) waitMembers(name string, names []string) {
	p.t.Helper()
	waitFor(p.ctx, p.t, name+" seeing "+strings.Join(names, ","), func() error {
		st, err := p.status(name)
		if err != nil {
			return err
		}
		var got []string
		for _, m := range st.Members {
			got = append(got, m.Name)
		}
		if !st.Ready || strings.Join(got, ",") != strings.Join(names, ",") {
			return fmt.Errorf("ready %v, members %v", st.Ready, got)
		}
		return nil
	})
}

// check takes one hit of an owner-mode limit of 2 per hour through pod
// name and returns the status.
func (p *pods) check(name, grpc string) string {
	p.t.Helper()
	out, _ := p.cliRun(name, "check", "--addr", grpc, "--name", "k8s", "--key", "alice",
		"--limit", "2", "--period", "1h", "--mode", "owner", "--json")
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		p.t.Errorf("check via %s: %v: %s", name, err, out)
		return "failed"
	}
	if r.Error != "" {
		p.t.Errorf("check via %s: %s", name, r.Error)
	}
	return r.Status
}

// remove prints the logs of a failed test and removes the containers and
// the network.
func (p *pods) remove() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p.mu.Lock()
	started := p.mu.started
	p.mu.Unlock()
	for _, c := range started {
		if p.t.Failed() {
			out, _ := docker(ctx, "logs", "--tail", "30", c)
			p.t.Logf("%s:\n%s", c, out)
		}
		if _, err := docker(ctx, "rm", "-f", "-v", c); err != nil {
			p.t.Error(err)
		}
	}
	if _, err := docker(ctx, "network", "rm", p.prefix); err != nil {
		p.t.Error(err)
	}
}

// loopback returns the listen address addr as reached from inside the pod.
func loopback(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return net.JoinHostPort("127.0.0.1", port)
}
