package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// byteSize is a flag.Value of a number of bytes, written as a whole number
// with an optional unit: B, KiB, MiB, GiB, TiB (as GOMEMLIMIT takes them) or
// Ki, Mi, Gi (as Kubernetes writes memory limits): "134217728", "128MiB"
// and "128Mi" are the same size.
type byteSize struct {
	p   *int64
	set *bool // set to true once a value was given
}

// byteUnits are the units byteSize takes, longest first.
var byteUnits = []struct {
	suffix string
	mult   int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"B", 1}}

// parseByteSize reads s as byteSize does.
func parseByteSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range byteUnits {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = num, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("want a whole number of bytes, with an optional unit B, KiB, MiB, GiB (or Ki, Mi, Gi)")
	}
	if n > math.MaxInt64/mult {
		return 0, errors.New("too large")
	}
	return n * mult, nil
}

func (b byteSize) String() string {
	if b.p == nil {
		return ""
	}
	v := *b.p
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if v != 0 && v%u.mult == 0 {
			return fmt.Sprintf("%d%s", v/u.mult, u.suffix)
		}
	}
	return strconv.FormatInt(v, 10)
}

func (b byteSize) Set(s string) error {
	n, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b.p = n
	*b.set = true
	return nil
}

// keyBudgetShare is the share of GOMEMLIMIT that --max-key-bytes takes
// when it is not given: the keys' half, the other half for the node's base
// (about 20 to 40 MiB), its calls in flight and the collector's headroom,
// which a heap near GOMEMLIMIT spends in collections.
const keyBudgetShare = 2

// keyBudgetFromMemLimit returns the default of --max-key-bytes under the
// environment variable GOMEMLIMIT (value goMemLimit, as the Go runtime
// takes it), and whether there is one.
func keyBudgetFromMemLimit(goMemLimit string) (int64, bool, error) {
	if goMemLimit == "" || goMemLimit == "off" {
		return 0, false, nil
	}
	n, err := parseByteSize(goMemLimit)
	if err != nil {
		return 0, false, fmt.Errorf("GOMEMLIMIT=%q: %v", goMemLimit, err)
	}
	return n / keyBudgetShare, true, nil
}
