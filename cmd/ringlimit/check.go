package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
	"github.com/ringlimit/ringlimit/client"
)

// checkOptions is the parsed command line of ringlimit check.
type checkOptions struct {
	addrs   []string
	item    client.Item
	timeout time.Duration
	json    bool
	tls     tlsFlags
}

const usageCheck = `ringlimit check: decide one item on a node and print the answer.

Usage: ringlimit check --name NAME --key KEY --limit N --period DURATION [flags]
       ringlimit check --rule RULE --key KEY [flags]

The bucket is (name, key): --name is the limit ("api"), --key the client
("alice"). --rule names a rule of the node's rules file instead
("edge/remote_address", docs/rules.md), which supplies the limit: then
--name and the limit flags are not given. --hits 0 peeks without taking anything. Durations are Go
durations ("500ms", "1m"). Exit code: 0 admitted, 1 over the limit,
2 bad command line, 3 the node could not be asked or rejected the item.

Flags:
`

// parseCheck parses the flags of ringlimit check, with the environment
// getenv. It writes --help and errors to out and returns flag.ErrHelp for
// --help.
func parseCheck(args []string, getenv func(string) string, out io.Writer) (checkOptions, error) {
	var o checkOptions
	it := &o.item
	fs := newFlagSet("check", usageCheck, out)
	var addrs, algorithm, mode, policy string
	fs.StringVar(&addrs, "addr", envOr(getenv, envAddr, "127.0.0.1:7101"), "gRPC address of the node (host:port); a comma-separated list spreads calls round-robin; default from $"+envAddr+" when set")
	fs.StringVar(&it.Name, "name", "", "name of the limit (required without --rule)")
	fs.StringVar(&it.Rule, "rule", "", "name of a rule of the node's rules file, which supplies the limit (instead of --name, --limit, --period, ...)")
	fs.StringVar(&it.Key, "key", "", "the client's key within the limit (required)")
	fs.Int64Var(&it.Hits, "hits", 1, "permits to take; 0 peeks (takes nothing)")
	fs.Int64Var(&it.Limit, "limit", 0, "permits per period (required)")
	fs.DurationVar(&it.Period, "period", 0, "period of the limit (required)")
	fs.Int64Var(&it.Burst, "burst", 0, "capacity after idling (default: the limit)")
	fs.StringVar(&algorithm, "algorithm", "", "token_bucket, leaky_meter, leaky_queue, fixed_window, sliding_log, sliding_counter, gcra, concurrency, smooth_bursty or smooth_warming_up (default: token_bucket)")
	fs.StringVar(&mode, "mode", "", "consistency mode: local, owner, cached or leased (default: the node's)")
	fs.StringVar(&policy, "policy", "", "partition policy: fail-open, fail-closed or local-share (default: the node's)")
	fs.DurationVar(&it.MaxWait, "max-wait", 0, "longest wait accepted (leaky_queue, smooth_*)")
	fs.DurationVar(&it.MinGap, "min-gap", 0, "least time between two admitted hits (sliding_log)")
	fs.BoolVar(&it.CountRejected, "count-rejected", false, "count rejected attempts too (sliding_log, fixed_window)")
	fs.DurationVar(&it.WarmUp, "warm-up", 0, "warm-up period (smooth_warming_up)")
	fs.Float64Var(&it.MaxBurstSeconds, "max-burst-seconds", 0, "Guava's maxBurstSeconds: seconds' worth of permits stored (smooth_bursty; default 1)")
	fs.Float64Var(&it.ColdFactor, "cold-factor", 0, "Guava's cold factor: a cold limiter is this many times slower (smooth_warming_up; default 3)")
	fs.StringVar(&it.Lease, "lease", "", "permit holder (concurrency)")
	fs.BoolVar(&it.Release, "release", false, "return the holder's permits instead of taking (concurrency)")
	fs.DurationVar(&o.timeout, "timeout", 3*time.Second, "longest wait for the answer, connecting included")
	fs.BoolVar(&o.json, "json", false, "print the answer as JSON")
	o.tls.register(fs)

	if err := parseArgs(fs, "check", args, out); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, usageErr(out, "check", "unexpected arguments %q", fs.Args())
	}
	for _, a := range strings.Split(addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			o.addrs = append(o.addrs, a)
		}
	}
	var err error
	switch {
	case len(o.addrs) == 0:
		return o, usageErr(out, "check", "--addr is empty")
	case it.Rule != "" && it.Name != "":
		return o, usageErr(out, "check", "--rule and --name: give one or the other (the rule names the bucket)")
	case it.Rule != "" && (it.Limit != 0 || it.Period != 0 || it.Burst != 0 || algorithm != "" ||
		it.MaxWait != 0 || it.MinGap != 0 || it.CountRejected || it.WarmUp != 0 || it.MaxBurstSeconds != 0 || it.ColdFactor != 0):
		return o, usageErr(out, "check", "--rule supplies the limit: drop --limit, --period, --burst, --algorithm, --max-wait, --min-gap, --count-rejected, --warm-up, --max-burst-seconds and --cold-factor")
	case it.Rule == "" && it.Name == "":
		return o, usageErr(out, "check", "--name is required (or --rule)")
	case it.Key == "":
		return o, usageErr(out, "check", "--key is required")
	case it.Rule == "" && it.Limit <= 0:
		return o, usageErr(out, "check", "--limit must be positive")
	case it.Rule == "" && it.Period <= 0:
		return o, usageErr(out, "check", "--period must be positive")
	case it.Hits < 0:
		return o, usageErr(out, "check", "--hits must not be negative")
	case o.timeout <= 0:
		return o, usageErr(out, "check", "--timeout must be positive")
	}
	it.Peek = it.Hits == 0 // the client's zero Hits would take one
	if it.Algorithm, err = parseAlgorithm(algorithm); err != nil {
		return o, usageErr(out, "check", "--algorithm: %v", err)
	}
	if it.Mode, err = check.ParseMode(mode); err != nil {
		return o, usageErr(out, "check", "--mode: %v", err)
	}
	if it.Policy, err = check.ParsePolicy(policy); err != nil {
		return o, usageErr(out, "check", "--policy: %v", err)
	}
	if err := o.tls.check(); err != nil {
		return o, usageErr(out, "check", "%v", err)
	}
	return o, nil
}

// runCheck asks the node and prints the answer; now reads the clock for
// "in 5s" after the reset time.
func runCheck(ctx context.Context, o checkOptions, now func() time.Time, stdout, stderr io.Writer) int {
	tlsCfg, err := o.tls.config()
	if err != nil {
		fmt.Fprintln(stderr, "ringlimit check:", err)
		return exitUsage
	}
	opts := []client.Option{client.WithTimeout(o.timeout)}
	if tlsCfg != nil {
		opts = append(opts, client.WithTLS(tlsCfg))
	}
	c, err := client.New(o.addrs, opts...)
	if err != nil {
		fmt.Fprintln(stderr, "ringlimit check:", err)
		return exitUsage
	}
	defer c.Close()
	res, err := c.Check(ctx, o.item)
	if err != nil {
		fmt.Fprintln(stderr, "ringlimit check:", err)
		if hint := httpPortHint(ctx, o.addrs, tlsCfg, min(o.timeout, time.Second)); hint != "" {
			fmt.Fprintln(stderr, "ringlimit check:", hint)
		}
		return exitFailed
	}
	r := res[0]
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(jsonOf(r)); err != nil {
			fmt.Fprintln(stderr, "ringlimit check:", err)
			return exitFailed
		}
	} else {
		writeResult(stdout, r, now())
	}
	switch r.Status {
	case check.StatusUnderLimit:
		return exitOK
	case check.StatusOverLimit:
		return exitOverLimit
	default: // the error is in the output
		return exitFailed
	}
}

// checkJSON is the --json form of a result: the field names and spellings
// of the node's HTTP API (POST /v1/check), plus the answering node.
type checkJSON struct {
	Status     string     `json:"status"`
	Error      string     `json:"error,omitempty"`
	Limit      int64      `json:"limit"`
	Remaining  int64      `json:"remaining"`
	ResetTime  *time.Time `json:"reset_time,omitempty"`
	RetryAfter string     `json:"retry_after"`
	Wait       string     `json:"wait"`
	Owner      string     `json:"owner,omitempty"`
	Mode       string     `json:"mode,omitempty"`
	Degraded   bool       `json:"degraded,omitempty"`
	Node       string     `json:"node,omitempty"`
}

func jsonOf(r client.Result) checkJSON {
	j := checkJSON{
		Status:     r.Status.String(),
		Limit:      r.Limit,
		Remaining:  r.Remaining,
		RetryAfter: r.RetryAfter.String(),
		Wait:       r.Wait.String(),
		Owner:      r.Owner,
		Degraded:   r.Degraded,
		Node:       r.Node,
	}
	if r.Mode != check.ModeDefault {
		j.Mode = r.Mode.String()
	}
	if ie, ok := r.Err.(*client.ItemError); ok {
		j.Error = ie.Message
	} else if r.Err != nil {
		j.Error = r.Err.Error()
	}
	if !r.ResetAt.IsZero() {
		t := r.ResetAt.UTC()
		j.ResetTime = &t
	}
	return j
}

// writeResult prints r as aligned "field: value" lines.
func writeResult(w io.Writer, r client.Result, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	line := func(k string, v any) { fmt.Fprintf(tw, "%s:\t%v\n", k, v) }
	line("status", r.Status)
	if r.Status == check.StatusError {
		if ie, ok := r.Err.(*client.ItemError); ok {
			line("error", ie.Message)
		} else {
			line("error", r.Err)
		}
	} else {
		line("limit", r.Limit)
		line("remaining", r.Remaining)
		if !r.ResetAt.IsZero() {
			line("reset", fmt.Sprintf("%s (in %s)", r.ResetAt.UTC().Format(time.RFC3339Nano), roundDuration(r.ResetAt.Sub(now))))
		}
		if r.Status == check.StatusOverLimit || r.RetryAfter > 0 {
			line("retry after", humanRetry(r.RetryAfter))
		}
		if r.Wait > 0 {
			line("wait", roundDuration(r.Wait))
		}
	}
	if r.Owner != "" {
		line("owner", r.Owner)
	}
	if r.Mode != check.ModeDefault {
		line("mode", r.Mode)
	}
	if r.Degraded {
		line("degraded", "yes: the owner could not be reached; the partition policy decided")
	}
	line("answered by", r.Node)
	tw.Flush()
}

// never is the retry-after of a request that can never be admitted (more
// hits than the bucket holds): the largest duration (docs/api.md).
const never = time.Duration(math.MaxInt64)

// humanRetry writes a retry-after for people: "never" for never, else
// rounded by roundDuration.
func humanRetry(d time.Duration) string {
	if d == never {
		return "never (the request asks for more than the limit can ever grant)"
	}
	return roundDuration(d).String()
}

// httpPortHint returns, when one of addrs answers HTTP/1.1 as a node's HTTP
// port does, a hint to give the gRPC port instead; "" otherwise. It is
// asked after a failed check, whose gRPC error ("http2: frame too large
// ... looked like an HTTP/1.1 header") does not say so; each address gets
// at most timeout.
func httpPortHint(ctx context.Context, addrs []string, tlsCfg *tls.Config, timeout time.Duration) string {
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
	}
	tr := &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: timeout}
	for _, a := range addrs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+a+"/healthz", nil)
		if err != nil {
			continue
		}
		resp, err := hc.Do(req)
		if err != nil {
			continue
		}
		resp.Body.Close()
		return fmt.Sprintf("%s answers HTTP/1.1 (%s), as a node's HTTP port does; ringlimit check speaks gRPC: "+
			"give --addr the node's gRPC port (its --grpc-addr; make run's node1 is 127.0.0.1:7101)", a, resp.Status)
	}
	return ""
}

// roundDuration rounds d for people: milliseconds below a second, tenths of
// a second below a minute, seconds above.
func roundDuration(d time.Duration) time.Duration {
	switch a := max(d, -d); {
	case a < time.Second:
		return d.Round(time.Millisecond)
	case a < time.Minute:
		return d.Round(100 * time.Millisecond)
	default:
		return d.Round(time.Second)
	}
}

// parseAlgorithm returns the algorithm named s; "" and "default" are the
// zero algorithm, the token bucket. An unknown name is an error that lists
// the valid ones.
func parseAlgorithm(s string) (bucket.Algorithm, error) {
	if s == "" || s == "default" {
		return 0, nil
	}
	a, err := bucket.ParseAlgorithm(s)
	if err != nil {
		names := make([]string, 0, len(bucket.Algorithms()))
		for _, a := range bucket.Algorithms() {
			names = append(names, a.String())
		}
		return 0, fmt.Errorf("unknown algorithm %q (want one of %s)", s, strings.Join(names, ", "))
	}
	return a, nil
}
