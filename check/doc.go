// Package check is the vocabulary of a rate-limit check: the Request a
// caller asks, the Response it gets, the consistency Mode and partition
// Policy it asks for, the Status an answer reports, and the errors of a
// check that could not be decided. The coordination core (sync), rules,
// envoy, middleware, client and the embedding root all speak it, with this
// one set of names, so that none of them needs to import the coordination
// core for its words, and none declares its own.
//
// The algorithm of a check is bucket.Algorithm (package bucket owns every
// algorithm; its zero value is the token bucket, as an unset algorithm is on
// the wire), carried in Request.Limit.
//
// Package check is a leaf: it imports only package bucket and the standard
// library. Its numeric values of Mode, Policy and Status are those of the
// wire (ringlimitv1.Mode, Policy and Status), pinned by a test.
package check
