// Command node runs one ringlimit node. See --help, README.md and
// docs/api.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ringlimit/ringlimit"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stderr))
}

// run starts a node and stops it gracefully on SIGTERM or SIGINT (a second
// signal kills the process). It returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	o, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	var h slog.Handler
	hopts := &slog.HandlerOptions{Level: o.logLevel}
	if o.logJSON {
		h = slog.NewJSONHandler(stderr, hopts)
	} else {
		h = slog.NewTextHandler(stderr, hopts)
	}
	log := slog.New(h)
	o.cfg.Logger = log
	o.cfg.Registry = prometheus.NewRegistry()
	o.cfg.Registry.MustRegister(collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	n, err := ringlimit.Start(ctx, o.cfg)
	if err != nil {
		log.Error("start failed", "err", err)
		return 1
	}
	<-ctx.Done()
	stop() // a second signal now kills the process
	log.Info("signal received; shutting down", "timeout", o.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	if err := n.Shutdown(sctx); err != nil {
		fmt.Fprintln(stderr, "shutdown:", err)
		return 1
	}
	return 0
}
