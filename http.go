package ringlimit

import (
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ringlimit/ringlimit/api"
)

// handler returns the node's HTTP API:
//
//	POST /v1/check   the JSON form of RateLimiter/Check
//	GET  /v1/cluster self, members and ring
//	GET  /healthz    200 while the process serves
//	GET  /readyz     200 once joined, 503 before and while shutting down
//	GET  /metrics    Prometheus metrics of this node
//	*    /v1/nginx/auth nginx's auth_request endpoint (docs/middleware.md)
//	GET  /debug/pprof/ Go's profiler, when Config.API.Pprof is set
func (n *Node) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/check", n.api.HTTP())
	mux.HandleFunc("GET /v1/cluster", n.httpCluster)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		api.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", n.httpReady)
	mux.Handle("/v1/nginx/auth", n.rules.nginx)
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.cfg.Registry, promhttp.HandlerOpts{
		ErrorLog: slogPrinter{n.log}, Registry: n.cfg.Registry,
	}))
	if n.cfg.API.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return api.HeaderLimit(n.cfg.API.MaxHeaderBytes, mux)
}

func (n *Node) httpReady(w http.ResponseWriter, _ *http.Request) {
	if reason := n.notReady(); reason != "" {
		api.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": reason})
		return
	}
	api.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (n *Node) httpCluster(w http.ResponseWriter, _ *http.Request) {
	api.WriteJSON(w, http.StatusOK, n.ClusterStatus())
}
