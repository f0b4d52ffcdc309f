package sim

import (
	"fmt"
	"io"
	"strings"
)

// tracer writes the story of one key during a run, for finding why a
// schedule left its bound (CheckTrace): each node's start, stop and
// leave, each view change with the node's live and failed members, its
// quorum and the key's owner on its ring, and each answer for the key that
// admitted or was decided by the partition policy, with the owner the
// answering node named, the tokens it reported left and when the request
// reached the node. Instants are
// seconds since the start: a node's own time for its view changes, the
// answer's for answers.
type tracer struct {
	w   io.Writer
	key int32
}

// SetTrace makes the run write the story of key (an index of the
// workload's keys) to w, one line per event; nil w stops it. A traced run
// steps its nodes on one goroutine, so that the lines come in one order.
// Call it before Run.
func (c *Cluster) SetTrace(w io.Writer, key int) error {
	if w == nil {
		c.tr = nil
		return nil
	}
	if key < 0 || key >= c.wl.keys() {
		return fmt.Errorf("%w: trace key %d: the workload has keys 0 to %d", ErrScenario, key, c.wl.keys()-1)
	}
	c.tr = &tracer{w: w, key: int32(key)}
	c.workers = 1
	for _, s := range c.nodes {
		if s.running() {
			c.traceNode(s, c.now, "view")
		}
	}
	return nil
}

// traceNode writes what node s did at the instant at ("start", "stop",
// "leave", "view") and, but for a stop, its view of the traced key.
func (c *Cluster) traceNode(s *simNode, at int64, what string) {
	if c.tr == nil {
		return
	}
	if s.n == nil {
		fmt.Fprintf(c.tr.w, "%9.4f %s %s\n", seconds(at), s.name, what)
		return
	}
	owner := "-"
	if r := s.n.Ring(); r != nil {
		if o, err := r.Owner(c.wl.keyName(int(c.tr.key))); err == nil {
			owner = o
		}
	}
	q := s.n.Quorum()
	minority := ""
	if q.Minority {
		minority = " minority"
	}
	fmt.Fprintf(c.tr.w, "%9.4f %s %s: live %s, failed %s, lost %s%s; owner of k%d %s\n", seconds(at), s.name, what,
		strings.Join(c.view(s), ","), names(c.failedView(s)), names(q.Lost), minority, c.tr.key, owner)
}

// traceDecision writes d, node s's answer, if it is one of the traced
// key's that admitted or was decided by the policy.
func (c *Cluster) traceDecision(s *simNode, d *decision) {
	if c.tr == nil || d.key != c.tr.key || !(d.allowed || d.degraded) {
		return
	}
	verdict := "rejected"
	if d.allowed {
		verdict = "admitted"
	}
	policy := ""
	if d.degraded {
		policy = " by policy"
	}
	if d.err {
		verdict = "error"
	}
	fmt.Fprintf(c.tr.w, "%9.4f %s k%d %s %d%s (owner %s, %d left; arrived %.4f)\n", seconds(d.at), s.name, d.key, verdict, d.hits, policy, d.owner, d.remaining, seconds(d.arrived))
}

// names joins ns with commas, "-" for none.
func names(ns []string) string {
	if len(ns) == 0 {
		return "-"
	}
	return strings.Join(ns, ",")
}

// seconds converts nanoseconds since the start to seconds.
func seconds(t int64) float64 { return float64(t) / 1e9 }
