//go:build guava

package bucket

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The differential test of SmoothBursty and SmoothWarmingUp against Guava
// 31.1 itself: seeded random sequences of acquire(n), tryAcquire(n),
// tryAcquire(n, timeout), setRate, Drain and idle gaps run on a bucket and,
// through the oracle program testdata/guava/RingLimitGuavaOracle.java, on
// Guava's RateLimiter with a manual clock; every decision and every wait must
// be the same. On the bucket, acquire(n) is Take with MaxWait MaxPeriod,
// tryAcquire(n) Take with MaxWait 0, tryAcquire(n, timeout) Take with MaxWait
// timeout (each set by a Reconfigure that changes MaxWait only, the per-call
// timeout), setRate a Reconfigure to a new Limit and Period, and Drain is
// Guava's acquire(n) whose wait is not compared (the calls after it are). `make guava` installs Debian's libguava-java and a JDK and runs it:
//
//	GUAVA_JAR=/usr/share/java/guava.jar go test -tags guava -run '^TestGuava' -v ./bucket/
//
// GUAVA_SEQUENCES (default 10000) and GUAVA_SEED (default 1) vary the run.
// A mismatch is shrunk to a minimal sequence, which the failure prints.

// gvT0 is the instant every sequence starts at, on a whole second: the
// oracle's clock reads the microseconds since it.
var gvT0 = time.Unix(1_700_000_000, 0)

// gvOp is one call of a sequence, after an idle gap.
type gvOp struct {
	kind    byte          // 'a' acquire, 't' tryAcquire(n), 'T' tryAcquire(n, timeout), 'r' setRate, 'd' Drain
	gap     time.Duration // idle time before the call (any nanoseconds)
	hits    int64         // 'a', 't', 'T'
	timeout time.Duration // 'T' (any nanoseconds)
	limit   int64         // 'r': the new rate as Limit per Period
	period  time.Duration // 'r'
}

// gvSeq is a limiter and the calls made on it. When sleeps is set, the caller
// sleeps every wait it is given, as Guava's acquire does; otherwise the waits
// pile up as a debt (many callers).
type gvSeq struct {
	l      Limit
	sleeps bool
	ops    []gvOp
}

// gvResult is the answer to one acquire or tryAcquire: admitted, and the wait
// in microseconds.
type gvResult struct {
	ok   bool
	wait int64
}

func (r gvResult) String() string {
	switch {
	case !r.ok:
		return "false"
	case r.wait < 0:
		return "(not seen)"
	}
	return fmt.Sprintf("true, wait %dµs", r.wait)
}

// gvFloat formats f so that Java's Double.parseDouble reads the same double.
func gvFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// gvMilli writes n thousandths as a decimal ("2.5"), as a Java user would
// write Guava's option; Java reads it as the nearest double.
func gvMilli(n uint64) string {
	s := strconv.FormatUint(n/1000, 10)
	if f := n % 1000; f != 0 {
		s += strings.TrimRight(fmt.Sprintf(".%03d", f), "0")
	}
	return s
}

// run plays q on a bucket. It returns the oracle's script for q, the
// bucket's answers, and a description of each call for a report.
func (q gvSeq) run() (script []string, got []gvResult, calls []string, err error) {
	l := q.l
	switch l.Algorithm {
	case SmoothBursty:
		// 0 asks the oracle for Guava's create(rate); else maxBurstSeconds
		// as a Java decimal.
		script = append(script, fmt.Sprintf("bursty %s %s", gvFloat(permitsPerSecond(l)), gvMilli(uint64(l.MaxBurstMillis))))
	default:
		script = append(script, fmt.Sprintf("warming %s %d %s", gvFloat(permitsPerSecond(l)), int64(l.WarmUp), gvMilli(uint64(l.ColdFactorMilli))))
	}
	b, err := New(l, gvT0)
	if err != nil {
		return nil, nil, nil, err
	}
	now := gvT0
	for _, op := range q.ops {
		now = now.Add(op.gap)
		us := nsToMicros(nanos(now)) - nsToMicros(nanos(gvT0))
		at := fmt.Sprintf("at %dµs (+%v): ", us, op.gap)
		if op.kind == 'r' {
			l.Limit, l.Period = op.limit, op.period
			if err := b.Reconfigure(now, l); err != nil {
				return nil, nil, nil, err
			}
			script = append(script, fmt.Sprintf("rate %d %s", us, gvFloat(permitsPerSecond(l))))
			calls = append(calls, at+fmt.Sprintf("setRate(%s) [limit %d per %v]", gvFloat(permitsPerSecond(l)), l.Limit, l.Period))
			continue
		}
		if op.kind == 'd' { // Drain is acquire(n) whose wait nobody sees
			if err := b.Drain(now, op.hits); err != nil {
				return nil, nil, nil, err
			}
			script = append(script, fmt.Sprintf("drain %d %d", us, op.hits))
			calls = append(calls, at+fmt.Sprintf("acquire(%d) as Drain", op.hits))
			got = append(got, gvResult{true, -1})
			continue
		}
		switch op.kind {
		case 'a':
			l.MaxWait = MaxPeriod
			script = append(script, fmt.Sprintf("acquire %d %d", us, op.hits))
			calls = append(calls, at+fmt.Sprintf("acquire(%d)", op.hits))
		case 't':
			l.MaxWait = 0
			script = append(script, fmt.Sprintf("try %d %d", us, op.hits))
			calls = append(calls, at+fmt.Sprintf("tryAcquire(%d)", op.hits))
		case 'T':
			l.MaxWait = op.timeout
			script = append(script, fmt.Sprintf("tryd %d %d %d", us, op.hits, int64(op.timeout)))
			calls = append(calls, at+fmt.Sprintf("tryAcquire(%d, Duration.ofNanos(%d))", op.hits, int64(op.timeout)))
		}
		if err := b.Reconfigure(now, l); err != nil { // the call's timeout
			return nil, nil, nil, err
		}
		d, err := b.Take(now, op.hits)
		if err != nil {
			return nil, nil, nil, err
		}
		got = append(got, gvResult{d.Allowed, int64(d.Wait / time.Microsecond)})
		if q.sleeps && d.Allowed {
			now = now.Add(d.Wait)
		}
	}
	return append(script, "end"), got, calls, nil
}

// String writes q as the Guava calls it makes.
func (q gvSeq) String() string {
	var s strings.Builder
	l := q.l
	switch l.Algorithm {
	case SmoothBursty:
		fmt.Fprintf(&s, "SmoothBursty rate %s/s [limit %d per %v], maxBurstSeconds %s", gvFloat(permitsPerSecond(l)), l.Limit, l.Period, gvFloat(l.maxBurstSeconds()))
	default:
		fmt.Fprintf(&s, "SmoothWarmingUp rate %s/s [limit %d per %v], warm-up %dns, cold factor %s", gvFloat(permitsPerSecond(l)), l.Limit, l.Period, int64(l.WarmUp), gvFloat(l.coldFactor()))
	}
	fmt.Fprintf(&s, ", callers sleep their waits: %v\n", q.sleeps)
	return s.String()
}

// gvOracle is the compiled oracle.
type gvOracle struct{ classpath string }

// gvCompile compiles the oracle against Guava's jar. Java and the jar are
// installed by `make guava`; their absence fails the test.
func gvCompile(t *testing.T) gvOracle {
	t.Helper()
	jar := os.Getenv("GUAVA_JAR")
	if jar == "" {
		jar = "/usr/share/java/guava.jar"
	}
	if _, err := os.Stat(jar); err != nil {
		t.Fatalf("Guava's jar: %v (run `make guava`, which installs Debian's libguava-java, or set GUAVA_JAR)", err)
	}
	for _, tool := range []string{"javac", "java"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v (run `make guava`, which installs Debian's default-jdk-headless)", tool, err)
		}
	}
	dir := t.TempDir()
	out, err := exec.Command("javac", "-Xlint:all", "-Werror", "-cp", jar, "-d", dir,
		filepath.Join("testdata", "guava", "RingLimitGuavaOracle.java")).CombinedOutput()
	if err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	return gvOracle{classpath: dir + string(os.PathListSeparator) + jar}
}

// answers runs the scripts of seqs in one JVM and returns Guava's answers,
// one slice per sequence.
func (o gvOracle) answers(t *testing.T, scripts [][]string) [][]gvResult {
	t.Helper()
	var in bytes.Buffer
	for _, s := range scripts {
		for _, line := range s {
			in.WriteString(line)
			in.WriteByte('\n')
		}
	}
	cmd := exec.Command("java", "-cp", o.classpath, "com.google.common.util.concurrent.RingLimitGuavaOracle")
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("oracle: %v\n%s", err, stderr.String())
	}
	all := make([][]gvResult, 0, len(scripts))
	var cur []gvResult
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		switch f := strings.Fields(sc.Text()); {
		case len(f) == 1 && f[0] == "end":
			all = append(all, cur)
			cur = nil
		case len(f) == 1 && f[0] == "0":
			cur = append(cur, gvResult{})
		case len(f) == 2 && f[0] == "1":
			w, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatalf("oracle: bad line %q", sc.Text())
			}
			cur = append(cur, gvResult{true, w})
		default:
			t.Fatalf("oracle: bad line %q", sc.Text())
		}
	}
	if len(all) != len(scripts) {
		t.Fatalf("oracle: %d sequences answered, want %d", len(all), len(scripts))
	}
	return all
}

// gvFirstMismatch returns the index of the first answer where got and want
// differ, or -1.
func gvFirstMismatch(got, want []gvResult) int {
	for i := range max(len(got), len(want)) {
		if i >= len(got) || i >= len(want) || got[i] != want[i] {
			return i
		}
	}
	return -1
}

// gvGen draws a random sequence of n calls.
func gvGen(rng *rand.Rand, n int) gvSeq {
	rate := func() (int64, time.Duration) {
		switch rng.IntN(5) {
		case 0, 1: // rates as users write them: 5/s, 1 per 3s, 7 per 100ms
			periods := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 10 * time.Second, 100 * time.Millisecond, time.Minute}
			return 1 + rng.Int64N(20), periods[rng.IntN(len(periods))]
		case 2: // permits less than a microsecond apart
			return 1 + rng.Int64N(10_000_000), time.Millisecond + time.Duration(rng.Int64N(int64(time.Second)))
		case 3: // one permit in minutes to hours
			return 1 + rng.Int64N(3), time.Minute + time.Duration(rng.Int64N(int64(2*time.Hour)))
		}
		return 1 + rng.Int64N(5000), time.Millisecond + time.Duration(rng.Int64N(int64(30*time.Second)))
	}
	var q gvSeq
	q.l.Limit, q.l.Period = rate()
	if rng.IntN(2) == 0 {
		q.l.Algorithm = SmoothBursty
		switch rng.IntN(4) {
		case 0, 1: // Guava's create(rate)
		case 2:
			q.l.MaxBurstMillis = []uint32{500, 1500, 2000, 10000, 100, 333, 1}[rng.IntN(7)]
		case 3:
			q.l.MaxBurstMillis = 1 + rng.Uint32N(20000)
		}
	} else {
		q.l.Algorithm = SmoothWarmingUp
		q.l.WarmUp = time.Microsecond + time.Duration(rng.Int64N(int64(20*time.Second)))
		switch rng.IntN(4) {
		case 0, 1: // Guava's create(rate, warmup)
		case 2:
			q.l.ColdFactorMilli = []uint16{1000, 2000, 10000, 3500, 1001}[rng.IntN(5)]
		case 3:
			q.l.ColdFactorMilli = uint16(1000 + rng.IntN(64536))
		}
	}
	q.sleeps = rng.IntN(3) == 0
	stable := time.Duration(float64(q.l.Period) / float64(q.l.Limit))
	for range n {
		var op gvOp
		switch g := rng.IntN(10); {
		case g < 4: // back to back
		case g < 8:
			op.gap = time.Duration(rng.Int64N(int64(2*stable) + 1))
		default:
			op.gap = time.Duration(rng.Int64N(int64(max(2*q.l.WarmUp, 5*time.Second))))
		}
		op.hits = 1 + rng.Int64N(4)
		if rng.IntN(10) == 0 {
			op.hits = 1 + rng.Int64N(100)
		}
		switch k := rng.IntN(20); {
		case k < 6:
			op.kind = 'a'
		case k < 7:
			op.kind = 'd'
		case k < 11:
			op.kind = 't'
		case k < 19:
			op.kind = 'T'
			op.timeout = time.Duration(rng.Int64N(int64(4*stable) + 1))
		default:
			op.kind = 'r'
			op.limit, op.period = rate()
		}
		q.ops = append(q.ops, op)
	}
	return q
}

// gvCandidates returns simpler variants of q: each call removed, each gap
// zeroed, each hits set to 1, each timeout zeroed, no sleeping.
func gvCandidates(q gvSeq) []gvSeq {
	var out []gvSeq
	with := func(f func(ops []gvOp)) {
		c := q
		c.ops = append([]gvOp(nil), q.ops...)
		f(c.ops)
		out = append(out, c)
	}
	for i := range q.ops {
		c := q
		c.ops = append(append([]gvOp(nil), q.ops[:i]...), q.ops[i+1:]...)
		out = append(out, c)
	}
	for i, op := range q.ops {
		if op.gap != 0 {
			with(func(ops []gvOp) { ops[i].gap = 0 })
			with(func(ops []gvOp) { ops[i].gap = ops[i].gap.Truncate(time.Microsecond) })
		}
		if op.hits > 1 {
			with(func(ops []gvOp) { ops[i].hits = 1 })
		}
		if op.timeout != 0 {
			with(func(ops []gvOp) { ops[i].timeout = ops[i].timeout.Truncate(time.Microsecond) })
		}
	}
	if q.sleeps {
		c := q
		c.sleeps = false
		out = append(out, c)
	}
	return out
}

// gvShrink returns a minimal sequence that still mismatches, starting from
// q, which does: it tries the simpler variants of the current sequence in one
// oracle run and keeps the first that still mismatches, until none does.
func gvShrink(t *testing.T, o gvOracle, q gvSeq) gvSeq {
	for round := 0; round < 500; round++ {
		cands := gvCandidates(q)
		var scripts [][]string
		var gots [][]gvResult
		var kept []gvSeq
		for _, c := range cands {
			s, got, _, err := c.run()
			if err != nil {
				continue
			}
			scripts, gots, kept = append(scripts, s), append(gots, got), append(kept, c)
		}
		if len(kept) == 0 {
			return q
		}
		wants := o.answers(t, scripts)
		shrunk := false
		for i := range kept {
			if gvFirstMismatch(gots[i], wants[i]) >= 0 {
				q, shrunk = kept[i], true
				break
			}
		}
		if !shrunk {
			return q
		}
	}
	return q
}

// gvReport describes q's calls with both answers, up to the first mismatch.
func gvReport(q gvSeq, want []gvResult) string {
	_, got, calls, _ := q.run()
	var s strings.Builder
	s.WriteString(q.String())
	r := 0
	for _, c := range calls {
		if strings.Contains(c, "setRate") {
			fmt.Fprintf(&s, "  %s\n", c)
			continue
		}
		fmt.Fprintf(&s, "  %s: Guava %v, ringlimit %v", c, want[r], got[r])
		if want[r] != got[r] {
			s.WriteString("   <- differs")
		}
		s.WriteByte('\n')
		r++
	}
	return s.String()
}

func gvEnvInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// TestGuavaDifferential compares SmoothBursty and SmoothWarmingUp with
// Guava's RateLimiter on random sequences: every decision and every wait,
// exactly.
func TestGuavaDifferential(t *testing.T) {
	o := gvCompile(t)
	n := gvEnvInt(t, "GUAVA_SEQUENCES", 10000)
	seed := uint64(gvEnvInt(t, "GUAVA_SEED", 1))
	rng := rand.New(rand.NewPCG(seed, 17))
	seqs := make([]gvSeq, n)
	scripts := make([][]string, n)
	gots := make([][]gvResult, n)
	counts := map[byte]int{}
	for i := range seqs {
		seqs[i] = gvGen(rng, 5+rng.IntN(56))
		var err error
		if scripts[i], gots[i], _, err = seqs[i].run(); err != nil {
			t.Fatalf("sequence %d: %v\n%v", i, err, seqs[i])
		}
		for _, op := range seqs[i].ops {
			counts[op.kind]++
		}
	}
	start := time.Now()
	wants := o.answers(t, scripts)
	jvm := time.Since(start)
	var compared, admitted, waited, mismatched int
	first := -1
	for i := range seqs {
		if gvFirstMismatch(gots[i], wants[i]) >= 0 {
			mismatched++
			if first < 0 {
				first = i
			}
		}
		for _, w := range wants[i] {
			if w.wait < 0 {
				continue // a Drain: what it did is compared by the calls after it
			}
			compared++
			if w.ok {
				admitted++
				if w.wait > 0 {
					waited++
				}
			}
		}
	}
	t.Logf("seed %d: %d sequences, %d calls (%d acquire, %d tryAcquire(n), %d tryAcquire(n, timeout), %d setRate, %d Drain); "+
		"%d decisions and waits compared (%d admitted, %d of them with a wait; %d rejected); mismatching sequences: %d; Guava's JVM run %v",
		seed, n, counts['a']+counts['t']+counts['T']+counts['r']+counts['d'], counts['a'], counts['t'], counts['T'], counts['r'], counts['d'],
		compared, admitted, waited, compared-admitted, mismatched, jvm.Round(time.Millisecond))
	if first >= 0 {
		q := gvShrink(t, o, seqs[first])
		s, _, _, _ := q.run()
		want := o.answers(t, [][]string{s})[0]
		t.Fatalf("%d of %d sequences differ from Guava; sequence %d shrunk to:\n%s", mismatched, n, first, gvReport(q, want))
	}
}
