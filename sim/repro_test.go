package sim

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/check"
)

// short returns the standard scenario name at 10s and at most 3000
// requests/s (the small-limit scenarios keep their own, lower rates).
func short(t *testing.T, name string) Scenario {
	t.Helper()
	s, err := Named(name)
	if err != nil {
		t.Fatal(err)
	}
	s = s.Scale(0, 10*time.Second)
	s.Workload.Rate = min(s.Workload.Rate, 3000)
	return s
}

// output runs sc under every mode and renders every format.
func output(t *testing.T, sc Scenario, seed uint64) ([]byte, []*Result) {
	t.Helper()
	vs, _ := ParseVariants("", "")
	rs, err := Compare([]Scenario{sc}, vs, Options{Seed: seed})
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	return render(t, rs), rs
}

// render renders rs in every format.
func render(t *testing.T, rs []*Result) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, write := range []func(*bytes.Buffer) error{
		func(b *bytes.Buffer) error { return WriteJSON(b, rs) },
		func(b *bytes.Buffer) error { return WriteCSV(b, rs) },
		func(b *bytes.Buffer) error { return WriteTable(b, rs) },
		func(b *bytes.Buffer) error { return WriteSVG(b, rs) },
	} {
		if err := write(&b); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

func TestReproducible(t *testing.T) {
	t.Parallel()
	every, err := LoadFile(filepath.Join("testdata", "everything.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range []Scenario{short(t, "partition-half").Scale(0, 6*time.Second), short(t, "churn").Scale(0, 6*time.Second), every} {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			const seed = 42
			a, rs := output(t, sc, seed)
			if b, _ := output(t, sc, seed); !bytes.Equal(a, b) {
				t.Fatalf("seed %d: two runs differ (%d and %d bytes)", seed, len(a), len(b))
			}
			// Another seed, in one mode: the modes share their arrivals,
			// which the seed draws.
			r, err := Run(sc, Variant{Mode: check.ModeCached}, Options{Seed: seed + 1})
			if err != nil {
				t.Fatalf("seed %d: %v", seed+1, err)
			}
			for _, same := range rs {
				if same.Mode == r.Mode && bytes.Equal(render(t, []*Result{same}), render(t, []*Result{r})) {
					t.Fatalf("seeds %d and %d give the same output (%s)", seed, seed+1, r.Mode)
				}
			}
		})
	}
}

// TestArrivalsIndependentOfMode checks that every mode of a comparison sees
// the same arrivals, so the ideal column is the same for all.
func TestArrivalsIndependentOfMode(t *testing.T) {
	t.Parallel()
	sc := short(t, "isolate-owner")
	vs, _ := ParseVariants("", "")
	rs, err := Compare([]Scenario{sc}, vs, Options{Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs[1:] {
		a, b := r.Phases[0], rs[0].Phases[0]
		if a.Requests != b.Requests || a.Hits != b.Hits || a.Ideal != b.Ideal {
			t.Errorf("seed 9: %s saw %d requests, %d hits, ideal %d; %s saw %d, %d, %d",
				r.Mode, a.Requests, a.Hits, a.Ideal, rs[0].Mode, b.Requests, b.Hits, b.Ideal)
		}
	}
}

// TestProgressDoesNotChangeTheRun: reporting progress schedules events of
// its own; the run must not notice.
func TestProgressDoesNotChangeTheRun(t *testing.T) {
	t.Parallel()
	sc := short(t, "flapping")
	v := Variant{Mode: check.ModeCached}
	a, err := Run(sc, v, Options{Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	b, err := Run(sc, v, Options{Seed: 4, Progress: func(Progress) { calls++ }})
	if err != nil {
		t.Fatal(err)
	}
	var ja, jb bytes.Buffer
	WriteJSON(&ja, []*Result{a})
	WriteJSON(&jb, []*Result{b})
	if !bytes.Equal(ja.Bytes(), jb.Bytes()) || calls != 10 {
		t.Fatalf("seed 4: with progress (%d calls, want 10) the output differs: %v", calls, !bytes.Equal(ja.Bytes(), jb.Bytes()))
	}
}

// crashJoin returns a 2-second scenario of 5 nodes, n2 crashing at 0.7 s
// and a new node joining at 1.4 s, under n requests/s over n uniform keys.
func crashJoin(n int) Scenario {
	return Scenario{Name: "crash-join", Nodes: 5, Duration: sec(2),
		Workload: Workload{Rate: float64(n), Keys: n, Dist: "uniform"},
		Events: []Event{
			{At: Duration(700 * time.Millisecond), Action: "crash", Node: "n2"},
			{At: Duration(1400 * time.Millisecond), Action: "join"},
		}}.WithDefaults()
}

// TestReproducibleAfterCrash: after a crash and a join, with many keys per
// node, the owners' backups of their keys are cut into messages; that must
// not depend on Go's map order (it did: the bytes metric differed from run
// to run).
func TestReproducibleAfterCrash(t *testing.T) {
	t.Parallel()
	sc := crashJoin(100_000)
	v := Variant{Mode: check.ModeCached}
	var outs [2][]byte
	for i := range outs {
		r, err := Run(sc, v, Options{Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := WriteJSON(&b, []*Result{r}); err != nil {
			t.Fatal(err)
		}
		outs[i] = b.Bytes()
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Fatalf("seed 7: two runs differ (%d and %d bytes)", len(outs[0]), len(outs[1]))
	}
}

// TestCompareParallel: running the simulations of a comparison at once
// gives the results of running them one after the other, in the same order.
func TestCompareParallel(t *testing.T) {
	t.Parallel()
	scs := []Scenario{short(t, "isolate-owner").Scale(0, 3*time.Second), short(t, "hot-key").Scale(0, 3*time.Second)}
	vs, _ := ParseVariants("", "50ms,100ms")
	var outs [2][]byte
	for i, parallel := range []int{1, 4} {
		rs, err := Compare(scs, vs, Options{Seed: 3, Parallel: parallel})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := WriteJSON(&b, rs); err != nil {
			t.Fatal(err)
		}
		outs[i] = b.Bytes()
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Fatalf("seed 3: one at a time and four at once differ (%d and %d bytes)", len(outs[0]), len(outs[1]))
	}
}

// TestWorkersDoNotChangeResults: the nodes of a window run at once on
// several workers (step.go); the Result must be the one a single worker
// gives, byte for byte, through crashes, joins, leaves and partitions.
// The crash and join run at 10,000 requests/s (5 per window, each window
// on the workers): with the nodes drawing their messages' delays from one
// shared generator instead of one each, every coordinated mode of it
// differs between 1 and 2 workers. At 50,000 requests/s it took minutes
// in leased mode, for the fences' waiting checks (docs/bench.md).
func TestWorkersDoNotChangeResults(t *testing.T) {
	t.Parallel()
	every, err := LoadFile(filepath.Join("testdata", "everything.json"))
	if err != nil {
		t.Fatal(err)
	}
	scs := []Scenario{every, crashJoin(10_000), short(t, "churn").Scale(0, 4*time.Second),
		short(t, "rolling-restart").Scale(0, 4*time.Second), short(t, "flapping").Scale(0, 3*time.Second)}
	for _, sc := range scs {
		for _, m := range Modes() {
			t.Run(sc.Name+"/"+m.String(), func(t *testing.T) {
				t.Parallel()
				var want []byte
				for _, workers := range []int{1, 2, 5} {
					c, err := NewCluster(sc, Variant{Mode: m}, 11)
					if err != nil {
						t.Fatal(err)
					}
					c.workers, c.minParallel = workers, 1 // every window with a request on the workers
					r, err := c.Run(nil)
					if err != nil {
						t.Fatal(err)
					}
					if workers > 1 && c.parallelWindows == 0 {
						t.Fatalf("%d workers: no window ran its nodes at once", workers)
					}
					var b bytes.Buffer
					if err := WriteJSON(&b, []*Result{r}); err != nil {
						t.Fatal(err)
					}
					if want == nil {
						want = b.Bytes()
					} else if !bytes.Equal(b.Bytes(), want) {
						t.Fatalf("seed 11: %d workers give a different result from 1 (%d and %d bytes)", workers, b.Len(), len(want))
					}
				}
			})
		}
	}
}
