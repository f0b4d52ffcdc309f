// Command node runs one ringlimit node; it is built as ringlimit-node
// (make build), never plain node. See --help, README.md and
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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memlimit"
	"github.com/ringlimit/ringlimit/rules"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stderr))
}

// rulesReloader is the part of a node that SIGHUP drives.
type rulesReloader interface {
	ReloadRules() error
}

// waitAndReload reloads the rules on every value of hup until ctx ends, or
// until refused gives an error, which it returns. The node logs the outcome
// of each reload; a node without rules says so here.
func waitAndReload(ctx context.Context, hup <-chan os.Signal, refused <-chan error, n rulesReloader, log *slog.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-refused:
			return err
		case <-hup:
			if err := n.ReloadRules(); errors.Is(err, ringlimit.ErrNoRules) {
				log.Warn("SIGHUP: nothing to reload", "err", err)
			}
		}
	}
}

// run starts a node and stops it gracefully on SIGTERM or SIGINT (a second
// signal kills the process); SIGHUP reloads the rules file. A node that the
// cluster refuses (a live member has its name) stops and exits 1. It
// returns the exit code.
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
	if o.testClockOffset != 0 {
		log.Warn("test hook "+testClockOffsetEnv+" set: this node's clock reads offset from the host's; for tests only", "offset", o.testClockOffset)
	}
	o.cfg.Logger = log
	o.cfg.Registry = prometheus.NewRegistry()
	o.cfg.Registry.MustRegister(collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	n, err := ringlimit.Start(ctx, o.cfg)
	if err != nil {
		var list rules.ErrorList
		if errors.As(err, &list) {
			// One line per problem, as a compiler prints them.
			for _, p := range list {
				fmt.Fprintln(stderr, p.Error())
			}
		}
		log.Error("start failed", "err", err)
		return 1
	}
	tuned := make(chan struct{})
	tctx, stopTuning := context.WithCancel(ctx)
	go func() { // ends with tctx: joined below
		defer close(tuned)
		if o.tuneMemory {
			memlimit.New(n.KeyBytes).Run(tctx, time.Second)
		}
	}()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	refused := make(chan error, 1)
	waited := make(chan struct{})
	go func() { // ends with ctx or the node: joined below
		defer close(waited)
		if err := n.WaitReady(ctx); errors.Is(err, ringlimit.ErrNameTaken) {
			refused <- err
		}
	}()
	code := 0
	if err := waitAndReload(ctx, hup, refused, n, log); err != nil {
		log.Error("the cluster refused this node; stopping", "err", err)
		fmt.Fprintln(stderr, "ringlimit node:", err)
		code = 1
	} else {
		log.Info("signal received; shutting down", "timeout", o.shutdownTimeout)
	}
	stop() // a second signal now kills the process
	sctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	if err := n.Shutdown(sctx); err != nil {
		fmt.Fprintln(stderr, "shutdown:", err)
		code = 1
	}
	<-waited
	stopTuning()
	<-tuned
	return code
}
