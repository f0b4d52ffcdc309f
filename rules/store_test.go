package rules

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	rulesV1 = "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	rulesV2 = "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2}\n"
	rulesB  = "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 9}\n"
	broken  = "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: many}\n"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func rpu(t *testing.T, s *Set, name string) int64 {
	t.Helper()
	r, ok := s.Lookup(name)
	if !ok {
		return -1
	}
	return r.RequestsPerUnit
}

func TestStorePollReloadsChangesAndKeepsOldRulesOnError(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	write(t, path, rulesV1)
	var events []Event
	cfg := DefaultStoreConfig(path)
	cfg.OnReload = func(ev Event) { events = append(events, ev) }
	st, err := NewStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		step      string
		content   string // "" leaves the file alone
		remove    bool
		force     bool
		reloaded  bool
		errSubstr string
		rpu       int64 // of rule a/k in force afterwards
		events    int   // events reported so far
	}{
		{step: "unchanged", reloaded: false, rpu: 1},
		{step: "limit raised", content: rulesV2, reloaded: true, rpu: 2, events: 1},
		{step: "same content rewritten", content: rulesV2, reloaded: false, rpu: 2, events: 1},
		{step: "broken file rejected, old rules stay", content: broken, errSubstr: "rules.yaml:4:51: requests_per_unit must be an integer", rpu: 2, events: 2},
		{step: "broken file polled again: error kept, reported once", errSubstr: "requests_per_unit must be an integer", rpu: 2, events: 2},
		{step: "file removed", remove: true, errSubstr: "no such file", rpu: 2, events: 3},
		{step: "broken file back", content: broken, errSubstr: "must be an integer", rpu: 2, events: 4},
		{step: "fixed", content: rulesV1, reloaded: true, rpu: 1, events: 5},
		{step: "forced reload of unchanged rules reports nothing", force: true, reloaded: true, rpu: 1, events: 5},
	}
	for _, s := range steps {
		switch {
		case s.remove:
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		case s.content != "":
			write(t, path, s.content)
		}
		var reloaded bool
		var err error
		if s.force {
			err = st.Reload()
			reloaded = err == nil
		} else {
			reloaded, err = st.Poll()
		}
		if reloaded != s.reloaded {
			t.Errorf("%s: reloaded = %v, want %v", s.step, reloaded, s.reloaded)
		}
		if (err == nil) != (s.errSubstr == "") || err != nil && !strings.Contains(err.Error(), s.errSubstr) {
			t.Errorf("%s: err = %v, want %q", s.step, err, s.errSubstr)
		}
		if !errors.Is(st.Err(), err) && (st.Err() == nil) != (err == nil) {
			t.Errorf("%s: Err() = %v, want %v", s.step, st.Err(), err)
		}
		if got := rpu(t, st.Rules(), "a/k"); got != s.rpu {
			t.Errorf("%s: rule a/k allows %d per unit, want %d", s.step, got, s.rpu)
		}
		if len(events) != s.events {
			t.Errorf("%s: %d events, want %d", s.step, len(events), s.events)
		}
	}
	if got := events[0].Changes.Changed; !slices.Equal(got, []string{"a/k"}) || events[0].Old.Len() != 1 {
		t.Errorf("first event: %+v, want a/k changed", events[0])
	}
	var list ErrorList
	if !errors.As(events[1].Err, &list) || events[1].New != events[1].Old {
		t.Errorf("failed reload event: %+v, want an ErrorList and New == Old", events[1])
	}
}

func TestStoreDirectory(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), rulesV1)
	write(t, filepath.Join(dir, "b.yml"), rulesB)
	write(t, filepath.Join(dir, ".hidden.yaml"), broken)
	write(t, filepath.Join(dir, "notes.txt"), broken)
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A Kubernetes ConfigMap volume: files are links into a hidden directory.
	if err := os.Mkdir(filepath.Join(dir, "..data"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "..data", "c.yaml"), "domain: c\n")
	if err := os.Symlink(filepath.Join("..data", "c.yaml"), filepath.Join(dir, "c.yaml")); err != nil {
		t.Fatal(err)
	}
	st, err := NewStore(DefaultStoreConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Rules().Domains(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("domains = %v, want [a b c]", got)
	}
	// The same domain in two files is an error naming both.
	write(t, filepath.Join(dir, "d.yaml"), rulesB)
	_, err = st.Poll()
	if err == nil || !strings.Contains(err.Error(), "d.yaml:1:9: duplicate domain \"b\" (first defined at "+filepath.Join(dir, "b.yml")+":1)") {
		t.Errorf("duplicate domain across files: %v", err)
	}
	if got := st.Rules().Domains(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("after a failed reload domains = %v, want the old [a b c]", got)
	}
	set, err := Load(dir)
	if set != nil || err == nil {
		t.Errorf("Load of an invalid directory = %v, %v", set, err)
	}
}

func TestNewStoreErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.yaml")
	write(t, path, broken)
	if _, err := NewStore(DefaultStoreConfig(path)); !errors.Is(err, ErrInvalid) {
		t.Errorf("invalid rules: %v, want ErrInvalid", err)
	}
	if _, err := NewStore(DefaultStoreConfig(filepath.Join(dir, "missing.yaml"))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}
	if _, err := NewStore(StoreConfig{}); err == nil {
		t.Error("empty config accepted")
	}
}
