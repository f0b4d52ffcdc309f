package api

import (
	"testing"
	"time"
)

func TestKeyIsInjective(t *testing.T) {
	// Pairs with a NUL-free name; ("a\x00b", "c") would collide with the
	// first, which is why validation rejects names with a NUL byte.
	pairs := [][2]string{{"a", "b\x00c"}, {"ab", "c"}, {"a", "bc"}, {"", "abc"}}
	seen := map[string][2]string{}
	for _, p := range pairs {
		k := Key(p[0], p[1])
		if q, dup := seen[k]; dup {
			t.Errorf("Key(%q) == Key(%q)", p, q)
		}
		seen[k] = p
	}
	it := item{name: "a\x00b", uniqueKey: "c", limit: 1, period: time.Second}
	if _, err := it.request(1024); err == nil {
		t.Error("a name with a NUL byte was accepted")
	}
}

// TestLoneSurrogate: JSON escapes of half a surrogate pair are found (they
// would decode to U+FFFD, two keys sharing a bucket); whole pairs and other
// escapes are not.
func TestLoneSurrogate(t *testing.T) {
	for _, tt := range []struct {
		json string
		want int
	}{
		{`{"k":"\udc00"}`, 6},
		{`{"k":"\udc01"}`, 6},
		{`{"k":"a\ud800"}`, 7},
		{`{"k":"\ud800\u0041"}`, 6},
		{`{"k":"\ud83d\ude00"}`, -1},
		{`{"k":"\\udc00"}`, -1}, // an escaped backslash, then text
		{`{"k":"\u00e9\n\""}`, -1},
		{`{"k":"\uzzzz"}`, -1}, // malformed: the decoder's to report
	} {
		if got := loneSurrogate([]byte(tt.json)); got != tt.want {
			t.Errorf("loneSurrogate(%s) = %d, want %d", tt.json, got, tt.want)
		}
	}
}
