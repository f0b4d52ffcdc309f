// Command ringlimit is the operator's client of a ringlimit cluster:
//
//	ringlimit check --addr 127.0.0.1:7101 --name api --key alice --limit 10 --period 1m
//	ringlimit cluster --http 127.0.0.1:8101
//
// check asks a node to decide one item over gRPC (package client) and
// prints the answer; cluster prints a node's view of the members and the
// ring from GET /v1/cluster. See ringlimit help, and docs/deploy.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
