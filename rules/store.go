package rules

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// StoreConfig configures a Store.
type StoreConfig struct {
	// Path is a rules file, or a directory whose *.yaml and *.yml files
	// (not those starting with '.', not in subdirectories) are loaded in name
	// order. Symbolic links are followed, so a Kubernetes ConfigMap volume
	// works.
	Path string
	// OnReload, if set, is called after every reload that changed the rules
	// or failed (a failure repeated unchanged is reported once). It is
	// called with the Store's reload lock held, in order: it must not block,
	// nor call Reload or Poll.
	OnReload func(Event)
}

// Event reports one reload.
type Event struct {
	// Old is the set in force before the reload.
	Old *Set
	// New is the set in force after it: Old when Err is set.
	New *Set
	// Changes lists the rules added, removed and changed.
	Changes Changes
	// Err is why the reload failed (an ErrorList for invalid rules, or a
	// file error); the old rules stay in force.
	Err error
}

// DefaultStoreConfig returns the configuration of a Store of the rules at
// path.
func DefaultStoreConfig(path string) StoreConfig {
	return StoreConfig{Path: path}
}

// Validate reports whether c can configure a Store.
func (c StoreConfig) Validate() error {
	switch {
	case c.Path == "":
		return errors.New("rules: StoreConfig.Path is empty")
	}
	return nil
}

// Store holds the rules in force, loaded from files, and replaces them when
// the files change (Poll, which the caller calls on its own ticker) or on
// demand (Reload, for SIGHUP). It starts no goroutine. Invalid rules are rejected as a whole and the old ones stay in
// force. Readers get the current Set without locking. A Store is safe for
// concurrent use.
//
// A reload keeps the state of every bucket: buckets are keyed by what they
// count (domain and descriptor entries, or rule name and client key), not by
// the rule object, so an unchanged rule keeps its buckets untouched, and a
// rule whose limit changed reconfigures its live buckets on their next check
// the way Guava's setRate does (what is stored scales to the new capacity;
// nothing resets to full).
type Store struct {
	cfg StoreConfig
	cur atomic.Pointer[Set]

	mu struct {
		sync.Mutex
		tried    [sha256.Size]byte // digest of the content last parsed
		triedErr error             // why that content was rejected; nil if it is in force
		err      error             // last failure, nil after a success
	}
}

// NewStore loads the rules at cfg.Path and returns a Store holding them. It
// fails when the configuration, the files or the rules are invalid (the
// error is then an ErrorList). It starts no goroutine.
func NewStore(cfg StoreConfig) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	files, sum, err := readFiles(cfg.Path)
	if err != nil {
		return nil, err
	}
	set, err := build(files)
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg}
	s.cur.Store(set)
	s.mu.tried = sum
	return s, nil
}

// Load returns the rules at path, a file or a directory as in
// StoreConfig.Path, without watching them.
func Load(path string) (*Set, error) {
	files, _, err := readFiles(path)
	if err != nil {
		return nil, err
	}
	return build(files)
}

// Rules returns the rules in force. The Set is immutable; a later reload
// replaces it and does not change it.
func (s *Store) Rules() *Set { return s.cur.Load() }

// Err returns why the last reload failed, or nil when it succeeded.
func (s *Store) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.err
}

// Reload reads and parses the files again, even if they look unchanged, and
// puts the new rules in force when they are valid. On error the old rules
// stay in force. It is what a SIGHUP handler calls.
func (s *Store) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.reloadLocked(true)
	return err
}

// Poll reads the files and reloads them if their content changed since the
// last reload attempt. It reports whether new rules were put in force; the
// error is that of a failed reload (the old rules stay in force).
func (s *Store) Poll() (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloadLocked(false)
}

// reloadLocked implements Reload (force) and Poll.
func (s *Store) reloadLocked(force bool) (bool, error) {
	old := s.cur.Load()
	files, sum, err := readFiles(s.cfg.Path)
	if err != nil {
		s.failLocked(old, err)
		return false, err
	}
	if !force && sum == s.mu.tried {
		// Unchanged content; a file error in between may have passed.
		if s.mu.triedErr != nil {
			s.failLocked(old, s.mu.triedErr)
		}
		s.mu.err = s.mu.triedErr
		return false, s.mu.err
	}
	set, err := build(files)
	s.mu.tried, s.mu.triedErr = sum, err
	if err != nil {
		s.failLocked(old, err)
		return false, err
	}
	s.cur.Store(set)
	s.mu.err = nil
	ev := Event{Old: old, New: set, Changes: set.Diff(old)}
	if s.cfg.OnReload != nil && !ev.Changes.Empty() {
		s.cfg.OnReload(ev)
	}
	return true, nil
}

// failLocked records a failed reload and reports it unless it repeats the
// last failure word for word.
func (s *Store) failLocked(old *Set, err error) {
	repeated := s.mu.err != nil && s.mu.err.Error() == err.Error()
	s.mu.err = err
	if s.cfg.OnReload != nil && !repeated {
		s.cfg.OnReload(Event{Old: old, New: old, Err: err})
	}
}

// readFiles reads the rules file at path, or the rules files of the
// directory at path, and returns them with a digest of their names and
// contents.
func readFiles(path string) ([]file, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	info, err := os.Stat(path)
	if err != nil {
		return nil, sum, fmt.Errorf("rules: %w", err)
	}
	names := []string{path}
	if info.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, sum, fmt.Errorf("rules: %w", err)
		}
		names = names[:0]
		for _, e := range entries {
			n := e.Name()
			if strings.HasPrefix(n, ".") || !strings.HasSuffix(n, ".yaml") && !strings.HasSuffix(n, ".yml") {
				continue
			}
			full := filepath.Join(path, n)
			if fi, err := os.Stat(full); err != nil || fi.IsDir() {
				continue // a dangling link or a directory named *.yaml
			}
			names = append(names, full)
		}
		slices.Sort(names)
	}
	h := sha256.New()
	files := make([]file, 0, len(names))
	for _, n := range names {
		data, err := os.ReadFile(n)
		if err != nil {
			return nil, sum, fmt.Errorf("rules: %w", err)
		}
		var lens [16]byte
		binary.BigEndian.PutUint64(lens[:8], uint64(len(n)))
		binary.BigEndian.PutUint64(lens[8:], uint64(len(data)))
		h.Write(lens[:])
		h.Write([]byte(n))
		h.Write(data)
		files = append(files, file{name: n, data: data})
	}
	h.Sum(sum[:0])
	return files, sum, nil
}
