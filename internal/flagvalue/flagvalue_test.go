package flagvalue

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"testing"
	"time"
)

// TestExplain: each kind of value the flag package cannot parse gets a
// message that says how to write it, named by the flag, for the first bad
// value only; a boolean flag still takes no value.
func TestExplain(t *testing.T) {
	tests := []struct {
		args []string
		want string // the recorded error; "" for none
	}{
		{[]string{"--period", "60"}, `--period "60": a duration needs a unit: write e.g. "60ms" or "60s"`},
		{[]string{"--period", "1.5"}, `--period "1.5": a duration needs a unit: write e.g. "1.5ms" or "1.5s"`},
		{[]string{"--period", "soon"}, `--period "soon": not a duration: write a number and a unit, e.g. "100ms", "2s" or "1m30s"`},
		{[]string{"--count", "ten"}, `--count "ten": want a whole number`},
		{[]string{"--count", "99999999999999999999"}, `--count "99999999999999999999": out of range`},
		{[]string{"--streams", "-1"}, `--streams "-1": want a whole number, 0 or more`},
		{[]string{"--ratio", "half"}, `--ratio "half": want a number`},
		{[]string{"--json=maybe"}, `--json "maybe": want true or false`},
		{[]string{"--mode", "fast"}, `--mode "fast": want local, owner or cached`},
		{[]string{"--json", "--mode", "owner", "--period", "2s"}, ""},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var (
			d     time.Duration
			n     int64
			u     uint
			f     float64
			b     bool
			mode  string
			other string
		)
		fs.DurationVar(&d, "period", 0, "")
		fs.Int64Var(&n, "count", 0, "")
		fs.UintVar(&u, "streams", 0, "")
		fs.Float64Var(&f, "ratio", 0, "")
		fs.BoolVar(&b, "json", false, "")
		fs.StringVar(&other, "other", "", "")
		ChoiceVar(fs, &mode, "mode", "cached", []string{"local", "owner", "cached"}, "the mode")
		var bad error
		Explain(fs, &bad)
		err := fs.Parse(tt.args)
		switch {
		case tt.want == "" && (err != nil || bad != nil):
			t.Errorf("%q: %v, %v; want no error", tt.args, err, bad)
		case tt.want != "" && (err == nil || bad == nil || bad.Error() != tt.want):
			t.Errorf("%q: recorded %v; want %q", tt.args, bad, tt.want)
		}
		if tt.want == "" && (!b || mode != "owner" || d != 2*time.Second) {
			t.Errorf("%q: json %v, mode %q, period %v", tt.args, b, mode, d)
		}
	}
}

// TestParseMisuse: a flag the set does not define, or one without its
// value, is named with two dashes.
func TestParseMisuse(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--colour"}, "unknown flag --colour"},
		{[]string{"-colour=red"}, "unknown flag --colour"},
		{[]string{"--json", "--period", "1s", "--colour"}, "unknown flag --colour"},
		{[]string{"--period"}, "--period needs a value"},
		{[]string{"--json", "--period"}, "--period needs a value"},
		{[]string{"--period", "1s", "stray", "--colour"}, ""}, // flags end at "stray"
		{[]string{"-h"}, "flag: help requested"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var d time.Duration
		var b bool
		fs.DurationVar(&d, "period", 0, "")
		fs.BoolVar(&b, "json", false, "")
		var bad error
		Explain(fs, &bad)
		err := Parse(fs, tt.args, &bad)
		if got := fmt.Sprint(err); (tt.want == "" && err != nil) || (tt.want != "" && got != tt.want) {
			t.Errorf("%q: %v, want %q", tt.args, err, tt.want)
		}
	}
}

func TestChoiceDefaultAndUsage(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var mode string
	ChoiceVar(fs, &mode, "mode", "cached", []string{"owner", "cached"}, "the mode")
	f := fs.Lookup("mode")
	if mode != "cached" || f.DefValue != "cached" || f.Usage != "the mode: owner or cached" {
		t.Errorf("mode %q, default %q, usage %q", mode, f.DefValue, f.Usage)
	}
	if err := fs.Set("mode", "leased"); err == nil || errors.Is(err, flag.ErrHelp) {
		t.Errorf("Set(leased) = %v, want an error", err)
	}
}

func TestOrList(t *testing.T) {
	for _, tt := range []struct {
		in   []string
		want string
	}{{nil, ""}, {[]string{"a"}, "a"}, {[]string{"a", "b"}, "a or b"}, {[]string{"a", "b", "c"}, "a, b or c"}} {
		if got := OrList(tt.in); got != tt.want {
			t.Errorf("OrList(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
