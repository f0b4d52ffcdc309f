package ring

import (
	"fmt"
	"sync"
	"testing"
)

// TestHolderConcurrent runs readers against a writer that keeps changing
// the membership (run it with -race). Every owner a reader sees must be a
// member of the ring it read it from.
func TestHolderConcurrent(t *testing.T) {
	h, err := NewHolder(DefaultConfig(), names("node-", 3)...)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Go(func() {
			for i := range 5000 {
				r := h.Load()
				k := fmt.Sprintf("key-%d-%d", g, i)
				o, err := r.Owner(k)
				if err != nil || !r.Has(o) {
					errs <- fmt.Errorf("Owner(%q) = %q, %v on members %v", k, o, err, r.Members())
					return
				}
			}
		})
	}
	for i := range 50 {
		if _, err := h.SetMembers(names("node-", 3+i%4)); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestHolderConcurrentWriters checks that concurrent Adds are serialised:
// none is lost and each bumps the version once.
func TestHolderConcurrentWriters(t *testing.T) {
	h, err := NewHolder(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, n := range names("node-", 8) {
		wg.Go(func() {
			if _, err := h.Add(n); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := h.Load().Len(); got != 8 {
		t.Errorf("Len = %d after 8 concurrent Adds, want 8", got)
	}
	if got := h.Version(); got != 9 {
		t.Errorf("Version = %d after 8 concurrent Adds, want 9", got)
	}
}
