package sim

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// TestGolden pins the comparison table of every standard scenario, run short
// (10s, at most 3000 requests/s, seed 1), so that a change to bucket/, ring/ or sync/
// that moves the figures shows up in review. After an intended change:
//
//	go test ./sim -run TestGolden -update
//
// Under the race detector it runs a fifth of the scenarios (raceCut).
func TestGolden(t *testing.T) {
	t.Parallel()
	vs, _ := ParseVariants("", "")
	for _, name := range raceCut(Names()) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rs, err := Compare([]Scenario{short(t, name)}, vs, Options{Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := WriteTable(&got, rs); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Errorf("seed 1: %s differs from %s:\ngot:\n%s\nwant:\n%s", name, path, got.Bytes(), want)
			}
		})
	}
}
