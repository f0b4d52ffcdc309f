// Package deploy_test checks the deployment files: the Kubernetes manifests
// and the compose file against each other and against the node's flags
// (always), and the compose file against Docker (with the e2e build tag,
// compose_e2e_test.go).
package deploy_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/ringlimit/ringlimit"
)

// The subset of the Kubernetes API the manifests use. Decoding is strict,
// so a misspelt or misplaced field fails the test.
type (
	object struct {
		APIVersion string   `yaml:"apiVersion"`
		Kind       string   `yaml:"kind"`
		Metadata   metadata `yaml:"metadata"`
		Spec       yaml.Node
		// Type and StringData are a Secret's.
		Type       string            `yaml:"type"`
		StringData map[string]string `yaml:"stringData"`
	}
	metadata struct {
		Name        string            `yaml:"name"`
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	}
	serviceSpec struct {
		Type                     string            `yaml:"type"`
		ClusterIP                string            `yaml:"clusterIP"`
		PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
		Selector                 map[string]string `yaml:"selector"`
		Ports                    []servicePort     `yaml:"ports"`
	}
	servicePort struct {
		Name       string `yaml:"name"`
		Port       int    `yaml:"port"`
		TargetPort string `yaml:"targetPort"`
		Protocol   string `yaml:"protocol"`
	}
	labelSelector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	workloadSpec struct { // StatefulSet and Deployment
		ServiceName         string        `yaml:"serviceName"`
		Replicas            int           `yaml:"replicas"`
		PodManagementPolicy string        `yaml:"podManagementPolicy"`
		UpdateStrategy      yaml.Node     `yaml:"updateStrategy"`
		Strategy            yaml.Node     `yaml:"strategy"`
		Selector            labelSelector `yaml:"selector"`
		Template            struct {
			Metadata metadata `yaml:"metadata"`
			Spec     podSpec  `yaml:"spec"`
		} `yaml:"template"`
	}
	podSpec struct {
		TerminationGracePeriodSeconds int         `yaml:"terminationGracePeriodSeconds"`
		EnableServiceLinks            *bool       `yaml:"enableServiceLinks"`
		SecurityContext               yaml.Node   `yaml:"securityContext"`
		Affinity                      yaml.Node   `yaml:"affinity"`
		InitContainers                []container `yaml:"initContainers"`
		Containers                    []container `yaml:"containers"`
	}
	container struct {
		Name            string          `yaml:"name"`
		Image           string          `yaml:"image"`
		ImagePullPolicy string          `yaml:"imagePullPolicy"`
		RestartPolicy   string          `yaml:"restartPolicy"`
		Env             []envVar        `yaml:"env"`
		Ports           []containerPort `yaml:"ports"`
		StartupProbe    *probe          `yaml:"startupProbe"`
		ReadinessProbe  *probe          `yaml:"readinessProbe"`
		LivenessProbe   *probe          `yaml:"livenessProbe"`
		Resources       struct {
			Requests map[string]string `yaml:"requests"`
			Limits   map[string]string `yaml:"limits"`
		} `yaml:"resources"`
		SecurityContext yaml.Node `yaml:"securityContext"`
	}
	envVar struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
			ResourceFieldRef *struct {
				Resource      string `yaml:"resource"`
				ContainerName string `yaml:"containerName"`
			} `yaml:"resourceFieldRef"`
			SecretKeyRef *struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	}
	containerPort struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
		Protocol      string `yaml:"protocol"`
	}
	probe struct {
		HTTPGet *struct {
			Path string `yaml:"path"`
			Port string `yaml:"port"`
		} `yaml:"httpGet"`
		TCPSocket *struct {
			Port string `yaml:"port"`
		} `yaml:"tcpSocket"`
		InitialDelaySeconds int `yaml:"initialDelaySeconds"`
		PeriodSeconds       int `yaml:"periodSeconds"`
		FailureThreshold    int `yaml:"failureThreshold"`
	}
	pdbSpec struct {
		MaxUnavailable int           `yaml:"maxUnavailable"`
		Selector       labelSelector `yaml:"selector"`
	}
)

// manifest is one file's objects by kind and name, their specs decoded.
type manifest struct {
	services  map[string]serviceSpec
	workloads map[string]workloadSpec // StatefulSets and Deployments
	kinds     map[string]string       // workload name -> kind
	pdbs      map[string]pdbSpec
	secrets   map[string]map[string]string // Secret name -> its stringData
}

func decodeStrict(t *testing.T, where string, n *yaml.Node, into any) {
	t.Helper()
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(n); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	dec := yaml.NewDecoder(&buf)
	dec.KnownFields(true)
	if err := dec.Decode(into); err != nil {
		t.Fatalf("%s: spec (lines counted from spec:): %v", where, err)
	}
}

func loadManifest(t *testing.T, path string) manifest {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := manifest{services: map[string]serviceSpec{}, workloads: map[string]workloadSpec{},
		kinds: map[string]string{}, pdbs: map[string]pdbSpec{}, secrets: map[string]map[string]string{}}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	for i := 0; ; i++ {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, i, err)
		}
		where := path + ": " + o.Kind + " " + o.Metadata.Name
		if o.Metadata.Name == "" {
			t.Errorf("%s: document %d has no name", path, i)
		}
		switch o.Kind {
		case "Service":
			checkAPIVersion(t, where, o.APIVersion, "v1")
			var s serviceSpec
			decodeStrict(t, where, &o.Spec, &s)
			m.services[o.Metadata.Name] = s
		case "StatefulSet", "Deployment":
			checkAPIVersion(t, where, o.APIVersion, "apps/v1")
			var w workloadSpec
			decodeStrict(t, where, &o.Spec, &w)
			m.workloads[o.Metadata.Name] = w
			m.kinds[o.Metadata.Name] = o.Kind
		case "Secret":
			checkAPIVersion(t, where, o.APIVersion, "v1")
			m.secrets[o.Metadata.Name] = o.StringData
		case "PodDisruptionBudget":
			checkAPIVersion(t, where, o.APIVersion, "policy/v1")
			var p pdbSpec
			decodeStrict(t, where, &o.Spec, &p)
			m.pdbs[o.Metadata.Name] = p
		default:
			t.Errorf("%s: unexpected kind", where)
		}
	}
	return m
}

func checkAPIVersion(t *testing.T, where, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s: apiVersion %q, want %q", where, got, want)
	}
}

// selects reports whether every label of sel is in labels.
func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// nodeFlags returns the flag names that cmd/node defines, read from its
// source (fs.StringVar(&x, "name", ...), flagvalue.ChoiceVar(fs, &x,
// "name", ...): the first string argument of a call of a ...Var function),
// so that the environment variables of the manifests cannot drift from the
// flags.
func nodeFlags(t *testing.T) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "cmd", "node", "flags.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) < 2 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !strings.HasSuffix(sel.Sel.Name, "Var") {
			return true
		}
		for _, arg := range call.Args[1:min(len(call.Args), 3)] {
			if lit, ok := arg.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				name, _ := strconv.Unquote(lit.Value)
				flags[name] = true
				break
			}
		}
		return true
	})
	if len(flags) < 10 {
		t.Fatalf("found only %d flags in cmd/node/flags.go: %v", len(flags), flags)
	}
	return flags
}

// checkEnv checks that every RINGLIMIT_ variable names a node flag and
// returns the variables' plain values.
func checkEnv(t *testing.T, where string, env map[string]string, flags map[string]bool) {
	t.Helper()
	for k := range env {
		name, ok := strings.CutPrefix(k, "RINGLIMIT_")
		if !ok {
			continue
		}
		flag := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
		if !flags[flag] {
			t.Errorf("%s: %s sets no flag of the node (no --%s)", where, k, flag)
		}
	}
}

// ringlimitContainer returns the container of w's pods named ringlimit.
func ringlimitContainer(t *testing.T, name string, w workloadSpec) container {
	t.Helper()
	for _, c := range slices.Concat(w.Template.Spec.InitContainers, w.Template.Spec.Containers) {
		if c.Name == "ringlimit" {
			return c
		}
	}
	t.Fatalf("%s: no container named ringlimit", name)
	return container{}
}

// envOf returns c's environment: a field reference as "$(path)", a key of
// a Secret of m as its value.
func envOf(m manifest, c container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		switch {
		case e.ValueFrom == nil:
		case e.ValueFrom.FieldRef != nil:
			env[e.Name] = "$(" + e.ValueFrom.FieldRef.FieldPath + ")"
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = m.secrets[e.ValueFrom.SecretKeyRef.Name][e.ValueFrom.SecretKeyRef.Key]
		}
	}
	return env
}

// nodeConfig returns the node configuration that env sets (the fields the
// deployment files set), for Validate.
func nodeConfig(env map[string]string) ringlimit.Config {
	c := ringlimit.DefaultConfig()
	c.Name = "pod-0"
	for k, p := range map[string]*string{
		"RINGLIMIT_GRPC_ADDR": &c.API.GRPCAddr, "RINGLIMIT_HTTP_ADDR": &c.API.HTTPAddr,
		"RINGLIMIT_GOSSIP_ADDR": &c.Gossip.Addr, "RINGLIMIT_PEER_ADDR": &c.Peer.Addr,
	} {
		if v, ok := env[k]; ok {
			*p = v
		}
	}
	c.Sidecar = env["RINGLIMIT_SIDECAR"] == "true"
	if k := env["RINGLIMIT_GOSSIP_KEY"]; k != "" {
		// A compose file's "${VAR:-default}" is its default.
		if _, def, ok := strings.Cut(strings.TrimSuffix(k, "}"), ":-"); ok {
			k = def
		}
		c.Gossip.Key, _ = base64.StdEncoding.DecodeString(k) // Validate checks its size
	}
	c.Gossip.Seeds = strings.Split(env["RINGLIMIT_SEEDS"], ",")
	return c
}

// listenPort returns the port of the listen address env[v] and checks its
// host: 0.0.0.0 when public, a loopback address otherwise.
func listenPort(t *testing.T, where string, env map[string]string, v string, public bool) int {
	t.Helper()
	host, port, err := net.SplitHostPort(env[v])
	p, _ := strconv.Atoi(port)
	switch {
	case err != nil || p == 0:
		t.Errorf("%s: %s = %q, want host:port", where, v, env[v])
	case public && host != "0.0.0.0":
		t.Errorf("%s: %s = %q, want 0.0.0.0:port (peers and probes come from the pod IP)", where, v, env[v])
	case !public && host != "127.0.0.1":
		t.Errorf("%s: %s = %q, want 127.0.0.1:port (the application beside it only)", where, v, env[v])
	}
	return p
}

// checkNodePod checks the ringlimit container of a workload: its
// configuration is valid; its seeds resolve through a headless Service that
// publishes not-ready pods and selects the workload's pods; what must be
// reached from the pod IP listens on 0.0.0.0 at a declared container port
// (standalone: gRPC, HTTP and gossip; sidecar: the peer port and gossip,
// the public API on loopback); its probes reach it; it asks for resources.
func checkNodePod(t *testing.T, m manifest, name string, flags map[string]bool, sidecar bool) {
	t.Helper()
	w := m.workloads[name]
	if !selects(w.Selector.MatchLabels, w.Template.Metadata.Labels) {
		t.Errorf("%s: selector %v does not select its template's labels %v", name, w.Selector.MatchLabels, w.Template.Metadata.Labels)
	}
	c := ringlimitContainer(t, name, w)
	env := envOf(m, c)
	checkEnv(t, name, env, flags)
	if env["RINGLIMIT_NAME"] != "$(metadata.name)" {
		t.Errorf("%s: RINGLIMIT_NAME is %q, want the pod's name", name, env["RINGLIMIT_NAME"])
	}
	if err := nodeConfig(env).Validate(); err != nil {
		t.Errorf("%s: the node would refuse its configuration: %v", name, err)
	}
	if (env["RINGLIMIT_SIDECAR"] == "true") != sidecar {
		t.Errorf("%s: RINGLIMIT_SIDECAR = %q, want sidecar %v", name, env["RINGLIMIT_SIDECAR"], sidecar)
	}

	ports := map[string]int{} // container port by name
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	declared := func(v string, port int) {
		for _, p := range ports {
			if p == port {
				return
			}
		}
		t.Errorf("%s: %s port %d is not a container port", name, v, port)
	}
	gossip := listenPort(t, name, env, "RINGLIMIT_GOSSIP_ADDR", true)
	declared("RINGLIMIT_GOSSIP_ADDR", gossip)
	grpc := listenPort(t, name, env, "RINGLIMIT_GRPC_ADDR", !sidecar)
	http := listenPort(t, name, env, "RINGLIMIT_HTTP_ADDR", !sidecar)
	peer := listenPort(t, name, env, "RINGLIMIT_PEER_ADDR", true)
	declared("RINGLIMIT_PEER_ADDR", peer)
	if sidecar {
		for what, pr := range map[string]*probe{"startupProbe": c.StartupProbe, "livenessProbe": c.LivenessProbe} {
			if pr == nil || pr.TCPSocket == nil || ports[pr.TCPSocket.Port] != peer {
				t.Errorf("%s: %s %+v: want a TCP probe of the peer port %d (the API is on loopback)", name, what, pr, peer)
			}
		}
	} else {
		declared("RINGLIMIT_GRPC_ADDR", grpc)
		declared("RINGLIMIT_HTTP_ADDR", http)
		for what, pr := range map[string]*probe{"readinessProbe": c.ReadinessProbe, "livenessProbe": c.LivenessProbe} {
			want := map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"}[what]
			switch {
			case pr == nil || pr.HTTPGet == nil:
				t.Errorf("%s: no HTTP %s", name, what)
			case pr.HTTPGet.Path != want:
				t.Errorf("%s: %s path %q, want %q", name, what, pr.HTTPGet.Path, want)
			case ports[pr.HTTPGet.Port] != http:
				t.Errorf("%s: %s port %q is not the HTTP port %d", name, what, pr.HTTPGet.Port, http)
			}
		}
	}

	for _, s := range strings.Split(env["RINGLIMIT_SEEDS"], ",") {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			t.Errorf("%s: seed %q is not host:port", name, s)
			continue
		}
		svcName, _, _ := strings.Cut(host, ".")
		svc, ok := m.services[svcName]
		switch {
		case !ok:
			t.Errorf("%s: seed %q names no Service of the file", name, s)
		case svc.ClusterIP != "None" || !svc.PublishNotReadyAddresses:
			t.Errorf("%s: seed Service %s must be headless and publish not-ready addresses", name, svcName)
		case !selects(svc.Selector, w.Template.Metadata.Labels):
			t.Errorf("%s: seed Service %s selects %v, not the pods %v", name, svcName, svc.Selector, w.Template.Metadata.Labels)
		case port != strconv.Itoa(gossip):
			t.Errorf("%s: seed %q is not the gossip port %d", name, s, gossip)
		}
	}

	if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" || c.Resources.Limits["memory"] == "" {
		t.Errorf("%s: resources %+v: want cpu and memory requests and a memory limit", name, c.Resources)
	}
	if w.Template.Spec.TerminationGracePeriodSeconds < 20 {
		t.Errorf("%s: terminationGracePeriodSeconds %d: shorter than the node's shutdown (15s) and then some",
			name, w.Template.Spec.TerminationGracePeriodSeconds)
	}

	// Every Service selecting these pods targets ports the pods declare.
	all := map[string]bool{}
	for _, ctr := range slices.Concat(w.Template.Spec.InitContainers, w.Template.Spec.Containers) {
		for _, p := range ctr.Ports {
			all[p.Name] = true
		}
	}
	for sname, svc := range m.services {
		if !selects(svc.Selector, w.Template.Metadata.Labels) {
			continue
		}
		for _, p := range svc.Ports {
			if !all[p.TargetPort] {
				t.Errorf("Service %s: port %s targets %q, which no container of %s declares", sname, p.Name, p.TargetPort, name)
			}
		}
	}
}

func TestKubernetesStatefulSet(t *testing.T) {
	flags := nodeFlags(t)
	m := loadManifest(t, filepath.Join("k8s", "ringlimit.yaml"))
	const name = "ringlimit"
	if m.kinds[name] != "StatefulSet" {
		t.Fatalf("no StatefulSet %s: %v", name, m.kinds)
	}
	checkNodePod(t, m, name, flags, false)
	w := m.workloads[name]
	if svc, ok := m.services[w.ServiceName]; !ok || svc.ClusterIP != "None" {
		t.Errorf("serviceName %q is not a headless Service of the file", w.ServiceName)
	}
	// Nodes started together could each start a cluster of their own.
	if w.PodManagementPolicy != "OrderedReady" {
		t.Errorf("podManagementPolicy %q, want OrderedReady", w.PodManagementPolicy)
	}
	if w.Replicas < 3 {
		t.Errorf("replicas %d, want at least 3", w.Replicas)
	}
	api, ok := m.services["ringlimit"]
	if !ok || api.Type != "ClusterIP" || api.ClusterIP == "None" {
		t.Errorf("no ClusterIP Service ringlimit for the public API: %+v", api)
	}
	pdb, ok := m.pdbs[name]
	if !ok || pdb.MaxUnavailable != 1 || !selects(pdb.Selector.MatchLabels, w.Template.Metadata.Labels) {
		t.Errorf("PodDisruptionBudget %s: %+v, want maxUnavailable 1 over the StatefulSet's pods", name, pdb)
	}
}

func TestKubernetesSidecar(t *testing.T) {
	flags := nodeFlags(t)
	m := loadManifest(t, filepath.Join("k8s", "sidecar.yaml"))
	const name = "web"
	if m.kinds[name] != "Deployment" {
		t.Fatalf("no Deployment %s: %v", name, m.kinds)
	}
	checkNodePod(t, m, name, flags, true)
	w := m.workloads[name]
	c := ringlimitContainer(t, name, w)
	if c.RestartPolicy != "Always" || !slices.ContainsFunc(w.Template.Spec.InitContainers, func(c container) bool { return c.Name == "ringlimit" }) {
		t.Errorf("the ringlimit container is not a native sidecar (an init container with restartPolicy Always)")
	}
	if c.StartupProbe == nil {
		t.Errorf("the sidecar has no startup probe: the application could start before it listens")
	}
	var app *container
	for i := range w.Template.Spec.Containers {
		if w.Template.Spec.Containers[i].Name != "ringlimit" {
			app = &w.Template.Spec.Containers[i]
		}
	}
	if app == nil || envOf(m, *app)["RINGLIMIT_ADDR"] != "127.0.0.1:7101" {
		t.Errorf("the application container does not point at its sidecar on 127.0.0.1:7101")
	}
}

// TestComposeFile checks docker-compose.yml without Docker: three nodes,
// each seeding through the others and never through itself, every
// RINGLIMIT_ variable a node flag, distinct published ports.
func TestComposeFile(t *testing.T) {
	flags := nodeFlags(t)
	raw, err := os.ReadFile("docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
			Image       string            `yaml:"image"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Services) != 3 {
		t.Fatalf("%d services, want 3", len(f.Services))
	}
	published := map[string]string{}
	for name, s := range f.Services {
		checkEnv(t, name, s.Environment, flags)
		env := map[string]string{ // the image's defaults, then the file's
			"RINGLIMIT_GRPC_ADDR": "0.0.0.0:7101", "RINGLIMIT_HTTP_ADDR": "0.0.0.0:8101", "RINGLIMIT_GOSSIP_ADDR": "0.0.0.0:7946"}
		maps.Copy(env, s.Environment)
		if err := nodeConfig(env).Validate(); err != nil {
			t.Errorf("%s: the node would refuse its configuration: %v", name, err)
		}
		if s.Environment["RINGLIMIT_NAME"] != name {
			t.Errorf("%s: RINGLIMIT_NAME %q, want the service's name", name, s.Environment["RINGLIMIT_NAME"])
		}
		if !strings.Contains(s.Image, "RINGLIMIT_IMAGE") {
			t.Errorf("%s: image %q does not follow $RINGLIMIT_IMAGE", name, s.Image)
		}
		var seeds []string
		for seed := range strings.SplitSeq(s.Environment["RINGLIMIT_SEEDS"], ",") {
			host, port, err := net.SplitHostPort(seed)
			if err != nil || port != "7946" {
				t.Errorf("%s: seed %q, want service:7946", name, seed)
				continue
			}
			if _, ok := f.Services[host]; !ok || host == name {
				t.Errorf("%s: seed %q is not another service of the file", name, seed)
			}
			seeds = append(seeds, host)
		}
		if len(seeds) != len(f.Services)-1 {
			t.Errorf("%s: seeds %v, want the %d other nodes", name, seeds, len(f.Services)-1)
		}
		for _, p := range s.Ports {
			if other, dup := published[p]; dup {
				t.Errorf("%s and %s both publish %s", name, other, p)
			}
			published[p] = name
		}
	}
}
