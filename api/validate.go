package api

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/check"
)

// keySep separates the name from the unique key in a bucket's cluster-wide
// key. Names may not contain it, so Key is injective: ("a", "b\x00c") and
// ("a\x00b", "c") cannot collide.
const keySep = "\x00"

// Key returns the cluster-wide key of the token bucket of (name,
// uniqueKey): name, a NUL byte, uniqueKey. The ring hashes it to the
// bucket's owner. Rules' buckets have this key whatever their algorithm.
func Key(name, uniqueKey string) string { return name + keySep + uniqueKey }

// algTagLen is the length of the algorithm tag that starts the key of a
// bucket of another algorithm than the token bucket (bucketKey).
const algTagLen = 2

// KeyOverhead is how many bytes longer than len(name) + len(unique_key)
// the core's key of an item can be: the separator and the algorithm tag.
// A core's bound on keys is Config.MaxKeyLen + KeyOverhead.
const KeyOverhead = len(keySep) + algTagLen

// bucketKey returns the cluster-wide key of the bucket of (name, uniqueKey)
// under the algorithm alg: Key(name, uniqueKey) for the token bucket and,
// for any other algorithm, a NUL byte and the algorithm's number in one byte
// before it. Each algorithm thus has a bucket of its own: a check naming
// another algorithm cannot replace a spent bucket with a fresh one (issue
// 16). The keys stay distinct: a token bucket's key never starts with NUL
// (names are non-empty and NUL-free), and the rules' descriptor keys have
// 'r' after it, not a byte below 0x20.
func bucketKey(name, uniqueKey string, alg bucket.Algorithm) string {
	if alg == bucket.TokenBucket {
		return Key(name, uniqueKey)
	}
	return string([]byte{0, byte(alg)}) + name + keySep + uniqueKey
}

// FieldError reports an invalid field of one check item. Over the API it
// becomes the item's error message, "field: reason".
type FieldError struct {
	// Field is the offending field, spelt as on the API ("limit", "period").
	Field string
	// Reason says what is wrong with it.
	Reason string
}

// Error implements error.
func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// item is one check item, decoded from either API but not yet validated.
// err, when set, is a decoding error (a malformed duration string, an
// unknown algorithm name) reported instead of validating.
type item struct {
	name, uniqueKey         string
	hits, limit, burst      int64
	period, maxWait, minGap time.Duration
	warmUp                  time.Duration
	maxBurstSeconds         float64 // Guava's options, as numbers; 0 is the default
	coldFactor              float64
	algorithm               int64 // 0 means token bucket
	mode                    int64
	policy                  int64
	countRejected, release  bool
	lease                   string
	rule                    string // a rule's name; resolved by applyRule before request
	ruleBucket              bool   // the limit is rule's: the bucket is Key(name, uniqueKey)
	err                     error
}

// maxMode and maxPolicy are the largest valid wire values.
const (
	maxMode   = int64(check.ModeLeased)
	maxPolicy = int64(check.PolicyLocalShare)
)

// request validates it and returns the core's request. maxKeyLen bounds
// len(name) + len(unique_key), and len(lease). The error is a *FieldError.
func (it *item) request(maxKeyLen int) (check.Request, error) {
	if it.err != nil {
		return check.Request{}, it.err
	}
	switch {
	case it.name == "":
		return check.Request{}, fieldErr("name", "must not be empty")
	case strings.Contains(it.name, keySep):
		return check.Request{}, fieldErr("name", "must not contain a NUL byte")
	case it.uniqueKey == "":
		return check.Request{}, fieldErr("unique_key", "must not be empty")
	case len(it.name)+len(it.uniqueKey) > maxKeyLen:
		return check.Request{}, fieldErr("unique_key", "name and unique_key together are %d bytes, more than the maximum %d",
			len(it.name)+len(it.uniqueKey), maxKeyLen)
	case len(it.lease) > maxKeyLen:
		// A concurrency bucket keeps every lease id it holds: bound them as keys are.
		return check.Request{}, fieldErr("lease", "%d bytes, more than the maximum %d", len(it.lease), maxKeyLen)
	case it.hits < 0:
		return check.Request{}, fieldErr("hits", "must not be negative, got %d", it.hits)
	case it.algorithm < 0 || it.algorithm > maxAlgorithm:
		return check.Request{}, fieldErr("algorithm", "unknown algorithm %d", it.algorithm)
	case it.mode < 0 || it.mode > maxMode:
		return check.Request{}, fieldErr("mode", "unknown mode %d", it.mode)
	case it.policy < 0 || it.policy > maxPolicy:
		return check.Request{}, fieldErr("policy", "unknown policy %d", it.policy)
	}
	alg := bucket.Algorithm(it.algorithm)
	if alg == 0 {
		alg = bucket.TokenBucket
	}
	lim := bucket.Limit{
		Algorithm:     alg,
		Limit:         it.limit,
		Period:        it.period,
		Burst:         it.burst,
		MaxWait:       it.maxWait,
		MinGap:        it.minGap,
		CountRejected: it.countRejected,
		WarmUp:        it.warmUp,
	}
	if err := lim.SetGuavaOptions(it.maxBurstSeconds, it.coldFactor); err != nil {
		return check.Request{}, asFieldError(err)
	}
	if err := lim.Validate(); err != nil {
		return check.Request{}, asFieldError(err)
	}
	if (it.lease != "" || it.release) && alg != bucket.Concurrency {
		return check.Request{}, fieldErr("lease", "lease and release are only for the concurrency algorithm")
	}
	if it.release && it.lease == "" {
		return check.Request{}, fieldErr("lease", "must name the holder to release")
	}
	keyAlg := alg
	if it.ruleBucket {
		keyAlg = bucket.TokenBucket // a rule's bucket is Key(name, uniqueKey), whatever its algorithm
	}
	return check.Request{
		Key:     bucketKey(it.name, it.uniqueKey, keyAlg), // built once: one allocation per item
		Hits:    it.hits,
		Limit:   lim,
		Mode:    check.Mode(it.mode),
		Policy:  check.Policy(it.policy),
		Lease:   it.lease,
		Release: it.release,
	}, nil
}

// asFieldError turns a bucket.LimitError into the API's FieldError; other
// errors pass through.
func asFieldError(err error) error {
	var le *bucket.LimitError
	if errors.As(err, &le) {
		return &FieldError{Field: le.Field, Reason: le.Reason}
	}
	return err
}

// errorMessage is what the API reports for an item's error: "field: reason"
// for invalid input, the error text otherwise.
func errorMessage(err error) string {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe.Error()
	}
	var le *bucket.LimitError
	if errors.As(err, &le) {
		return le.Field + ": " + le.Reason
	}
	return err.Error()
}
