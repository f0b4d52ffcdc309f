// Package rules reads rate-limit rules from YAML files in the shape of Lyft's
// (envoyproxy/ratelimit) configuration, matches descriptors to them, and
// keeps the rules in force up to date as the files change.
//
// A rules file holds one domain per YAML document:
//
//	domain: edge
//	descriptors:
//	  - key: remote_address              # each client address ...
//	    rate_limit:
//	      unit: second
//	      requests_per_unit: 10          # ... gets 10 requests per second
//	  - key: remote_address
//	    value: 50.0.0.5                  # except this one: blocked
//	    rate_limit: {unit: second, requests_per_unit: 0}
//	  - key: path
//	    value: /login
//	    descriptors:
//	      - key: user                    # (path=/login, user=...) nested
//	        rate_limit:
//	          unit: minute
//	          requests_per_unit: 5
//	          algorithm: token_bucket    # ringlimit extensions
//	          burst: 10
//	          mode: owner
//
// Matching follows Lyft's service (see [Set.Match]). Every rule has a stable
// name built from its domain and path ("edge/remote_address",
// "edge/path=%2Flogin/user", see [RuleName]) by which the public API can
// name it instead of spelling out a limit ([Set.Lookup]).
//
// The caller's loop:
//
//	st, err := rules.NewStore(rules.DefaultStoreConfig("/etc/ringlimit/rules"))
//	if err != nil { ... }            // an ErrorList: file:line: problem
//	// on your ticker: st.Poll()      // reload if the files changed
//	// on SIGHUP: st.Reload()
//	entries := []rules.Entry{{Key: "remote_address", Value: ip}}
//	r, ok := st.Rules().Match("edge", entries)
//	if ok && !r.Unlimited && !r.DeniesAll() {
//		req := r.Request(rules.DescriptorKey("edge", entries), 1) // to the checker
//	}
//	r, ok = st.Rules().Lookup("edge/remote_address") // a rule by name
//
// See docs/rules.md for the full format and the differences from Lyft's.
package rules
