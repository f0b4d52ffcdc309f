package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkRun runs the command with args and returns its exit code, stdout
// and stderr.
func checkRun(t *testing.T, tty bool, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code, err := run(args, &out, &errb, tty)
	if err != nil {
		t.Fatalf("simcheck %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// TestSameSeedSameBytes: the same flags give the same output, byte for
// byte, whatever -parallel; the progress bar goes to a terminal only.
func TestSameSeedSameBytes(t *testing.T) {
	args := []string{"-n", "3", "-seed", "5", "-duration", "10s", "-mode", "cached/local-share,owner/fail-closed"}
	c1, a, e1 := checkRun(t, false, append(args, "-parallel", "1")...)
	c2, b, e2 := checkRun(t, true, append(args, "-parallel", "2")...)
	if a != b || c1 != c2 {
		t.Errorf("two runs differ (exit %d and %d):\n%s\n----\n%s", c1, c2, a, b)
	}
	if e1 != "" || !strings.Contains(e2, "6/6 schedules") {
		t.Errorf("progress: not a terminal %q; a terminal %q (want the bar only there)", e1, e2)
	}
	if !strings.Contains(a, "cached/local-share       3 schedules") {
		t.Errorf("no summary line of cached mode:\n%s", a)
	}
}

// TestScheduleFile: a schedule as a failure prints it runs again from a
// file; a bad one is an error.
func TestScheduleFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "s.json")
	if err := os.WriteFile(good, []byte(`{"seed":4,"nodes":4,"detect":"788ms","faults":[{"at":"3s","kind":"isolate","node":"owner","for":"2s"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := checkRun(t, false, "-schedule", good, "-duration", "10s", "-mode", "cached/local-share")
	if code != 0 || !strings.Contains(out, "cached/local-share       1 schedules,    0 over") {
		t.Errorf("exit %d:\n%s", code, out)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"seed":4,"nodes":4,"faults":[{"at":"3s","kind":"nope"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var o, e bytes.Buffer
	if code, err := run([]string{"-schedule", bad}, &o, &e, false); err == nil || code != 2 {
		t.Errorf("a schedule with an unknown fault: exit %d, error %v; want 2 and an error", code, err)
	}
}

// TestTrace: -trace k writes one key's story to stderr, the same bytes
// twice, and the summary to stdout as without it; it takes one schedule
// and one mode, and a key named k0, k1, ...
func TestTrace(t *testing.T) {
	args := []string{"-seed", "4", "-n", "1", "-duration", "10s", "-mode", "owner/fail-closed", "-shrink", "0", "-trace", "k1"}
	c1, out1, e1 := checkRun(t, false, args...)
	c2, out2, e2 := checkRun(t, false, args...)
	if c1 != c2 || out1 != out2 || e1 != e2 {
		t.Errorf("two traced runs differ (exit %d and %d)", c1, c2)
	}
	for _, want := range []string{" n1 view: live n1,", "; owner of k1 n", " k1 admitted 1 (owner n"} {
		if !strings.Contains(e1, want) {
			t.Errorf("trace has no %q:\n%.2000s", want, e1)
		}
	}
	_, plain, _ := checkRun(t, false, args[:len(args)-2]...)
	if plain != out1 {
		t.Errorf("stdout with -trace differs from without:\n%s\n----\n%s", out1, plain)
	}
	for _, bad := range [][]string{
		{"-n", "2", "-trace", "k1"},
		{"-n", "1", "-trace", "x1"},
		{"-n", "1", "-trace", "k99", "-mode", "owner/fail-closed"},
		{"-n", "1", "-trace", "k1", "-mode", "owner/fail-closed,leased/fail-closed"},
	} {
		var o, e bytes.Buffer
		if code, err := run(append([]string{"-duration", "10s"}, bad...), &o, &e, false); err == nil || code != 2 {
			t.Errorf("simcheck %v: exit %d, error %v; want 2 and an error", bad, code, err)
		}
	}
}
