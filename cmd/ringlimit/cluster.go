package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ringlimit/ringlimit"
)

// clusterOptions is the parsed command line of ringlimit cluster.
type clusterOptions struct {
	url     string // of GET /v1/cluster
	timeout time.Duration
	json    bool
	tls     tlsFlags
}

const usageCluster = `ringlimit cluster: print a node's view of the cluster: itself, the live
members and how the ring divides the keys among them.

Usage: ringlimit cluster [--http host:port] [--json]

Every node should list the same members and partitions; a node that lists
fewer has not heard of the others yet, or is cut off from them.

Flags:
`

// parseCluster parses the flags of ringlimit cluster, with the environment
// getenv. It writes --help and errors to out and returns flag.ErrHelp for
// --help.
func parseCluster(args []string, getenv func(string) string, out io.Writer) (clusterOptions, error) {
	var o clusterOptions
	fs := newFlagSet("cluster", usageCluster, out)
	var addr string
	fs.StringVar(&addr, "http", envOr(getenv, envHTTP, "127.0.0.1:8101"), "HTTP address of the node (host:port), or its base URL (https://host:port); default from $"+envHTTP+" when set")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "longest wait for the answer")
	fs.BoolVar(&o.json, "json", false, "print the node's JSON as is (indented)")
	o.tls.register(fs)
	if err := parseArgs(fs, "cluster", args, out); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, usageErr(out, "cluster", "unexpected arguments %q", fs.Args())
	}
	if o.timeout <= 0 {
		return o, usageErr(out, "cluster", "--timeout must be positive")
	}
	if err := o.tls.check(); err != nil {
		return o, usageErr(out, "cluster", "%v", err)
	}
	u, err := clusterURL(addr, o.tls.on())
	if err != nil {
		return o, usageErr(out, "cluster", "--http: %v", err)
	}
	o.url = u
	return o, nil
}

// clusterURL returns the URL of GET /v1/cluster on the node at addr: a
// host:port (https when tls) or a base URL.
func clusterURL(addr string, tls bool) (string, error) {
	addr = strings.TrimSuffix(strings.TrimSpace(addr), "/")
	switch {
	case addr == "":
		return "", fmt.Errorf("empty")
	case strings.HasPrefix(addr, "http://"), strings.HasPrefix(addr, "https://"):
		return addr + "/v1/cluster", nil
	case strings.Contains(addr, "://"):
		return "", fmt.Errorf("%q: want host:port, http:// or https://", addr)
	case tls:
		return "https://" + addr + "/v1/cluster", nil
	default:
		return "http://" + addr + "/v1/cluster", nil
	}
}

// runCluster fetches and prints the node's view.
func runCluster(ctx context.Context, o clusterOptions, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintln(stderr, "ringlimit cluster:", err)
		return exitFailed
	}
	tlsCfg, err := o.tls.config()
	if err != nil {
		fmt.Fprintln(stderr, "ringlimit cluster:", err)
		return exitUsage
	}
	hc := &http.Client{Timeout: o.timeout}
	if tlsCfg != nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tlsCfg
		hc.Transport = tr
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.url, nil)
	if err != nil {
		return fail(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		var op *net.OpError
		if !errors.As(err, &op) || op.Op != "dial" {
			// Connected, but no HTTP/1.1 came back: a gRPC port answers
			// with an HTTP/2 frame ("malformed HTTP response \x00\x00...").
			err = fmt.Errorf("%w\n(is %s the node's HTTP port, its --http-addr? A gRPC port does not answer HTTP/1.1; make run's node1 serves HTTP on 127.0.0.1:8101)", err, req.URL.Host)
		}
		return fail(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fail(fmt.Errorf("reading %s: %w", o.url, err))
	}
	if resp.StatusCode != http.StatusOK {
		return fail(fmt.Errorf("GET %s: %s: %s", o.url, resp.Status, bytes.TrimSpace(body)))
	}
	if o.json {
		var buf bytes.Buffer
		if err := json.Indent(&buf, body, "", "  "); err != nil {
			return fail(fmt.Errorf("GET %s: %w", o.url, err))
		}
		buf.WriteByte('\n')
		_, _ = stdout.Write(buf.Bytes())
		return exitOK
	}
	var st ringlimit.ClusterStatus
	if err := json.Unmarshal(body, &st); err != nil {
		return fail(fmt.Errorf("GET %s: %w", o.url, err))
	}
	writeCluster(stdout, &st)
	return exitOK
}

// writeCluster prints st: the node, a table of members (gossip's view
// joined with the ring's partitions), and the ring's summary.
func writeCluster(w io.Writer, st *ringlimit.ClusterStatus) {
	ready := "ready"
	if !st.Ready {
		ready = "NOT READY"
	}
	fmt.Fprintf(w, "node %s: %s, default mode %s, policy %s\n", st.Self, ready, st.Mode, st.Policy)
	fmt.Fprintf(w, "  grpc %s  http %s  gossip %s\n\n", st.GRPCAddr, orDash(st.HTTPAddr), st.GossipAddr)

	parts := map[string]int{}
	for _, m := range st.Ring.Members {
		parts[m.Name] = m.Partitions
	}
	seen := map[string]bool{}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tSTATE\tPARTITIONS\tGRPC\tGOSSIP\tPROTOCOL")
	for _, m := range st.Members {
		seen[m.Name] = true
		name := m.Name
		if m.Self {
			name += " (self)"
		}
		p := "not in ring"
		if m.InRing {
			p = fmt.Sprint(parts[m.Name])
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", name, m.State, p, m.GRPCAddr, orDash(m.GossipAddr), m.Protocol)
	}
	// Members of the ring that gossip no longer lists: on their way out.
	var gone []string
	for name := range parts {
		if !seen[name] {
			gone = append(gone, name)
		}
	}
	sort.Strings(gone)
	for _, name := range gone {
		fmt.Fprintf(tw, "%s\t%s\t%d\t-\t-\t-\n", name, "gone", parts[name])
	}
	tw.Flush()

	r := st.Ring
	fmt.Fprintf(w, "\nring: version %d, %d members, %d partitions (average %.1f, at most %.0f per member), replication factor %d, load %.2f\n",
		r.Version, len(r.Members), r.PartitionCount, r.AverageLoad, r.MaxLoad, r.ReplicationFactor, r.Load)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
