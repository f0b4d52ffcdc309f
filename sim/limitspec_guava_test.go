package sim

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/ringlimit/ringlimit/bucket"
)

// TestLimitSpecGuavaOptions: a scenario's max_burst_seconds and cold_factor
// reach bucket.Limit in thousandths; a value finer than 0.001 is an error
// naming the option.
func TestLimitSpecGuavaOptions(t *testing.T) {
	for _, tt := range []struct {
		spec      string
		want      bucket.Limit
		wantField string
	}{
		{`{"algorithm":"smooth_bursty","limit":5,"period":"1s","max_burst_seconds":2.5}`,
			bucket.Limit{Algorithm: bucket.SmoothBursty, Limit: 5, Period: 1e9, MaxBurstMillis: 2500}, ""},
		{`{"algorithm":"smooth_warming_up","limit":5,"period":"1s","warm_up":"4s","cold_factor":10}`,
			bucket.Limit{Algorithm: bucket.SmoothWarmingUp, Limit: 5, Period: 1e9, WarmUp: 4e9, ColdFactorMilli: 10000}, ""},
		{`{"algorithm":"smooth_bursty","limit":5,"period":"1s","max_burst_seconds":0.0005}`, bucket.Limit{}, "max_burst_seconds"},
		{`{"algorithm":"smooth_warming_up","limit":5,"period":"1s","warm_up":"4s","cold_factor":0.5}`, bucket.Limit{}, "cold_factor"},
	} {
		var s LimitSpec
		if err := json.Unmarshal([]byte(tt.spec), &s); err != nil {
			t.Fatal(err)
		}
		got, err := s.Bucket()
		var le *bucket.LimitError
		switch {
		case tt.wantField != "" && (!errors.As(err, &le) || le.Field != tt.wantField):
			t.Errorf("%s: got %+v, %v; want an error on %s", tt.spec, got, err, tt.wantField)
		case tt.wantField == "" && (err != nil || got != tt.want):
			t.Errorf("%s: got %+v, %v; want %+v", tt.spec, got, err, tt.want)
		}
	}
}
