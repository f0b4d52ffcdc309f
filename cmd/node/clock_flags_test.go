package main

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"
)

// TestClockFlags: --max-clock-offset sets the core's bound; the test hook
// RINGLIMIT_TEST_CLOCK_OFFSET gives the node a clock that far from the
// host's, refuses a bad duration, and is not listed by --help (it is a
// hook, not a setting).
func TestClockFlags(t *testing.T) {
	var out bytes.Buffer
	o, err := parseFlags([]string{"--max-clock-offset=2s"}, withSecret(map[string]string{testClockOffsetEnv: "30m"}), &out)
	if err != nil {
		t.Fatalf("parseFlags: %v (%s)", err, out.String())
	}
	if got := o.cfg.Sync.MaxClockOffset; got != 2*time.Second {
		t.Errorf("MaxClockOffset %v, want 2s", got)
	}
	if o.cfg.Clock == nil || o.testClockOffset != 30*time.Minute {
		t.Fatalf("test hook not applied: clock %v, offset %v", o.cfg.Clock, o.testClockOffset)
	}
	if d := o.cfg.Clock.Now().Sub(time.Now()); d < 29*time.Minute || d > 31*time.Minute {
		t.Errorf("hooked clock reads %v from the host's, want 30m", d)
	}

	o, err = parseFlags(nil, withSecret(nil), &out)
	if err != nil || o.cfg.Clock != nil || o.cfg.Sync.MaxClockOffset != 500*time.Millisecond {
		t.Errorf("defaults: err %v, clock %v, bound %v; want no hook and 500ms", err, o.cfg.Clock, o.cfg.Sync.MaxClockOffset)
	}

	out.Reset()
	if _, err := parseFlags(nil, withSecret(map[string]string{testClockOffsetEnv: "soon"}), &out); err == nil || !strings.Contains(out.String(), testClockOffsetEnv) {
		t.Errorf("bad hook value: err %v, output %q; want an error naming %s", err, out.String(), testClockOffsetEnv)
	}
	out.Reset()
	if _, err := parseFlags(nil, withSecret(map[string]string{testClockOffsetEnv: "0s"}), &out); err != nil {
		t.Errorf("hook 0s: %v", err)
	}
	out.Reset()
	if _, err := parseFlags([]string{"--max-clock-offset=0"}, withSecret(nil), &out); err == nil || !strings.Contains(out.String(), "--max-clock-offset") {
		t.Errorf("--max-clock-offset=0: err %v, output %q; want an error naming the flag", err, out.String())
	}
	out.Reset()
	if _, err := parseFlags([]string{"--help"}, withSecret(nil), &out); err != flag.ErrHelp {
		t.Fatalf("--help: %v", err)
	}
	if h := out.String(); !strings.Contains(h, "--max-clock-offset") || strings.Contains(h, "TEST_CLOCK") {
		t.Errorf("--help lists --max-clock-offset: %v; the hook: %v (want yes, no)", strings.Contains(h, "--max-clock-offset"), strings.Contains(h, "TEST_CLOCK"))
	}
}
