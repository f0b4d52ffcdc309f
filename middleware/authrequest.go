package middleware

import "net/http"

// AuthRequest returns a handler for nginx's auth_request module: nginx sends
// it a subrequest for every client request, and lets the request through on
// 2xx. The handler answers 204 No Content when the client is within its
// limit and 429 Too Many Requests with Retry-After when it is over, both
// with the RateLimit-* headers, so that nginx can copy them to the client
// (auth_request_set). A subrequest whose key cannot be formed answers 403
// Forbidden unless Options.AllowBadKeys. A failed check answers 204 (fail
// open) or, with Options.FailClosed, 503.
//
// nginx passes only 2xx, 401 and 403 of the subrequest through as such; it
// turns every other status, 429 included, into 500 Internal Server Error.
// docs/middleware.md shows the error_page setup that gives the client its
// 429 and Retry-After.
//
// The client key comes by default from the X-Real-IP header, which the nginx
// configuration must set from $remote_addr: nginx forwards the client's own
// headers to the subrequest, so a header that nginx does not set is one the
// client chooses. The error is about invalid options.
func AuthRequest(c Checker, o Options) (http.Handler, error) {
	rejected := o.Rejected
	if rejected == nil {
		rejected = func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTooManyRequests) }
	}
	o.Rejected = rejected
	l, err := newLimiter(c, o, FromHeader("X-Real-IP"))
	if err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if l.serve(w, r) {
			w.WriteHeader(http.StatusNoContent)
		}
	}), nil
}
