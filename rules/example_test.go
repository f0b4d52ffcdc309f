package rules_test

import (
	"fmt"

	"github.com/ringlimit/ringlimit/rules"
)

func Example() {
	set, err := rules.Parse("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: path
    value: /login
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 5, algorithm: token_bucket, burst: 10, mode: owner}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, entries := range [][]rules.Entry{
		{{Key: "remote_address", Value: "10.0.0.1"}},
		{{Key: "remote_address", Value: "50.0.0.5"}},
		{{Key: "path", Value: "/login"}, {Key: "user", Value: "ada"}},
		{{Key: "path", Value: "/about"}},
	} {
		r, ok := set.Match("edge", entries)
		switch {
		case !ok:
			fmt.Printf("%v: not limited\n", entries)
		case r.DeniesAll():
			fmt.Printf("%v: %s denies all\n", entries, r.Name)
		default:
			fmt.Printf("%v: %s, %d per %v (%v, mode %v)\n", entries, r.Name, r.Limit.Limit, r.Limit.Period, r.Limit.Algorithm, r.Mode)
		}
	}
	// Output:
	// [{remote_address 10.0.0.1}]: edge/remote_address, 10 per 1s (fixed_window, mode default)
	// [{remote_address 50.0.0.5}]: edge/remote_address=50.0.0.5 denies all
	// [{path /login} {user ada}]: edge/path=%2Flogin/user, 5 per 1m0s (token_bucket, mode owner)
	// [{path /about}]: not limited
}

func ExampleParse_errors() {
	_, err := rules.Parse("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: sec, requests_per_unit: 10}
  - key: path
    rate_limt: {unit: second, requests_per_unit: 1}
`))
	fmt.Println(err)
	// Output:
	// edge.yaml:5:24: unknown unit "sec" (want second, minute, hour, day, week, month or year)
	// edge.yaml:7:5: unknown key "rate_limt" in a descriptor (want one of key, value, rate_limit, descriptors, shadow_mode, quota_mode, share_threshold)
}

func ExampleSet_Lookup() {
	set, _ := rules.Parse("api.yaml", []byte(`
domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: gcra, burst: 50}
`))
	// A check can name the rule instead of spelling out its limit.
	r, ok := set.Lookup("api/api_key")
	fmt.Println(ok, r.Limit.Algorithm, r.Limit.Limit, r.Limit.Period, r.Limit.Burst)
	// Output:
	// true gcra 1000 1h0m0s 50
}
