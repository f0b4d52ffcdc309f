package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	gubernator "github.com/gubernator-io/gubernator/v2"
	"github.com/mailgun/holster/v4/tracing"
	"github.com/sirupsen/logrus"
)

// serveGubernator runs one Gubernator daemon, configured from the
// environment (GUBER_*) as Gubernator's own command does, until SIGTERM or
// SIGINT. It is the tool's subcommand (compare -serve-gubernator), run as a
// process of its own for each daemon. It differs from cmd/gubernator in two
// settings only: the memberlist node name is the instance ID
// (GUBER_INSTANCE_ID), so that several daemons on one host can form a
// cluster (cmd/gubernator leaves memberlist's default, the host name, which
// makes every daemon after the first conflict), and tracing is initialised
// without the resource attributes that cmd/gubernator merges in (with the
// OpenTelemetry of this module's graph, that merge fails on a schema URL
// conflict). Tracing is as cmd/gubernator sets it up otherwise: its
// exporter is chosen by OTEL_TRACES_EXPORTER, which the tool sets to none.
func serveGubernator() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := tracing.InitTracing(ctx, "github.com/gubernator-io/gubernator/v2",
		tracing.WithLevel(gubernator.GetTracingLevel())); err != nil {
		fmt.Fprintln(os.Stderr, "compare: gubernator: tracing:", err)
		return 1
	}
	defer func() { _ = tracing.CloseTracing(context.Background()) }()
	conf, err := gubernator.SetupDaemonConfig(logrus.StandardLogger(), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare: gubernator: config:", err)
		return 1
	}
	conf.MemberListPoolConf.NodeName = conf.InstanceID
	d, err := gubernator.SpawnDaemon(ctx, conf)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare: gubernator:", err)
		return 1
	}
	<-ctx.Done()
	d.Close()
	return 0
}
