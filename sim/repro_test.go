package sim

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	rlsync "github.com/ringlimit/ringlimit/sync"
)

// short returns the standard scenario name at 10s and 3000 requests/s.
func short(t *testing.T, name string) Scenario {
	t.Helper()
	s, err := Named(name)
	if err != nil {
		t.Fatal(err)
	}
	s = s.Scale(0, 10*time.Second)
	s.Workload.Rate = 3000
	return s
}

// output runs sc under every mode and renders every format.
func output(t *testing.T, sc Scenario, seed uint64) []byte {
	t.Helper()
	vs, _ := ParseVariants("", "")
	rs, err := Compare([]Scenario{sc}, vs, Options{Seed: seed})
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
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
	every, err := LoadFile(filepath.Join("testdata", "everything.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range []Scenario{short(t, "partition-half").Scale(0, 6*time.Second), short(t, "churn").Scale(0, 6*time.Second), every} {
		t.Run(sc.Name, func(t *testing.T) {
			const seed = 42
			a, b := output(t, sc, seed), output(t, sc, seed)
			if !bytes.Equal(a, b) {
				t.Fatalf("seed %d: two runs differ (%d and %d bytes)", seed, len(a), len(b))
			}
			if c := output(t, sc, seed+1); bytes.Equal(a, c) {
				t.Fatalf("seeds %d and %d give the same output", seed, seed+1)
			}
		})
	}
}

// TestArrivalsIndependentOfMode checks that every mode of a comparison sees
// the same arrivals, so the ideal column is the same for all.
func TestArrivalsIndependentOfMode(t *testing.T) {
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
	sc := short(t, "flapping")
	v := Variant{Mode: rlsync.ModeCached}
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

// TestReproducibleAfterCrash: after a crash and a join, with many keys per
// node, the owners' backups of their keys are cut into messages; that must
// not depend on Go's map order (it did: the bytes metric differed from run
// to run).
func TestReproducibleAfterCrash(t *testing.T) {
	sc := Scenario{Name: "crash-join", Nodes: 5, Duration: sec(2),
		Workload: Workload{Rate: 100_000, Keys: 100_000, Dist: "uniform"},
		Events: []Event{
			{At: Duration(700 * time.Millisecond), Action: "crash", Node: "n2"},
			{At: Duration(1400 * time.Millisecond), Action: "join"},
		}}.WithDefaults()
	v := Variant{Mode: rlsync.ModeCached}
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
