package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunFormats(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "out.svg")
	base := []string{"-scenario", "partition-half", "-nodes", "3", "-mode", "local,cached", "-seed", "1",
		"-duration", "3s", "-rate", "500", "-q"}
	tests := []struct {
		name  string
		args  []string
		check func(t *testing.T, out string)
	}{
		{"table", append(base, "-format", "table", "-plot", svg), func(t *testing.T, out string) {
			if !strings.Contains(out, "partition-half") || !strings.Contains(out, "cached") {
				t.Errorf("table lacks the runs:\n%s", out)
			}
			b, err := os.ReadFile(svg)
			if err != nil || !bytes.HasPrefix(b, []byte("<svg")) || !bytes.HasSuffix(b, []byte("</svg>\n")) {
				t.Errorf("plot: %v, %.40q", err, b)
			}
		}},
		{"json", append(base, "-format", "json"), func(t *testing.T, out string) {
			var rs []map[string]any
			if err := json.Unmarshal([]byte(out), &rs); err != nil || len(rs) != 2 {
				t.Errorf("json: %v, %d results", err, len(rs))
			}
		}},
		{"csv", append(base, "-format", "csv"), func(t *testing.T, out string) {
			rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
			// header + 2 runs x (all, before, during, after)
			if err != nil || len(rows) != 9 {
				t.Errorf("csv: %v, %d rows", err, len(rows))
			}
		}},
		{"json scenario file and flush list", []string{"-scenario", "../../sim/testdata/everything.json", "-mode", "cached",
			"-flush", "20ms,200ms", "-q", "-format", "csv"}, func(t *testing.T, out string) {
			if !strings.Contains(out, "everything,cached,20ms") || !strings.Contains(out, "everything,cached,200ms") {
				t.Errorf("csv lacks the flush variants:\n%s", out)
			}
		}},
		{"list", []string{"-list"}, func(t *testing.T, out string) {
			if !strings.Contains(out, "rolling-restart") {
				t.Errorf("list:\n%s", out)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			if err := run(tt.args, &out, &errs); err != nil {
				t.Fatalf("%v\n%s", err, errs.String())
			}
			tt.check(t, out.String())
		})
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-format", "xml"},
		{"-scenario", "nope"},
		{"-mode", "fast"},
		{"-flush", "soon"},
		{"-scenario", "missing.json"},
		{"stray"},
		{"-parallel", "-1"},
		{"-workers", "-2"},
	} {
		var out, errs bytes.Buffer
		if err := run(append(args, "-q"), &out, &errs); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

// TestProgressOnlyToATerminal: with stderr redirected to a file (make sim
// > log 2>&1), the progress line's updates are not written, only the
// summary line, with no carriage return.
func TestProgressOnlyToATerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) || isTerminal(&bytes.Buffer{}) {
		t.Fatal("a file or a buffer taken for a terminal")
	}
	var out bytes.Buffer
	if err := run([]string{"-scenario", "healthy", "-nodes", "3", "-mode", "owner", "-duration", "3s", "-rate", "500"}, &out, f); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(b), "\n") != 1 || strings.ContainsAny(string(b), "\r\033") || !strings.Contains(string(b), "1 runs") {
		t.Errorf("stderr = %q, want the summary line alone", b)
	}
}
