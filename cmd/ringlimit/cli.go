package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/ringlimit/ringlimit/internal/flagvalue"
)

// Exit codes.
const (
	exitOK        = 0 // check: admitted; cluster: printed
	exitOverLimit = 1 // check: rejected, over the limit
	exitUsage     = 2 // bad command line
	exitFailed    = 3 // the node could not be asked, or could not decide
)

const usageMain = `ringlimit: the command-line client of a ringlimit cluster.

Usage:
  ringlimit check   [flags]   decide one item on a node (gRPC) and print the answer
  ringlimit cluster [flags]   print a node's members and ring (HTTP GET /v1/cluster)
  ringlimit help [command]    print this, or a command's flags

Exit codes: 0 admitted (check) or done, 1 over the limit (check),
2 bad command line, 3 the node could not be asked or could not decide.
`

// Environment variables that give the node's addresses when the command
// line does not: scripts/cluster.sh (make run) prints them for its ports.
const (
	envAddr = "RINGLIMIT_ADDR" // default of check --addr
	envHTTP = "RINGLIMIT_HTTP" // default of cluster --http
)

// envOr returns the value of the environment variable name, or def when it
// is empty.
func envOr(getenv func(string) string, name, def string) string {
	if v := getenv(name); v != "" {
		return v
	}
	return def
}

// run executes the command line args, with the environment getenv, and
// returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageMain)
		return exitUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "check":
		o, err := parseCheck(rest, getenv, stderr)
		if err != nil {
			return parseExit(err)
		}
		return runCheck(ctx, o, time.Now, stdout, stderr)
	case "cluster":
		o, err := parseCluster(rest, getenv, stderr)
		if err != nil {
			return parseExit(err)
		}
		return runCluster(ctx, o, stdout, stderr)
	case "help", "-h", "-help", "--help":
		switch {
		case len(rest) == 0:
			fmt.Fprint(stdout, usageMain)
		case rest[0] == "check":
			_, _ = parseCheck([]string{"--help"}, getenv, stdout)
		case rest[0] == "cluster":
			_, _ = parseCluster([]string{"--help"}, getenv, stdout)
		default:
			fmt.Fprintf(stderr, "ringlimit help: unknown command %q\n\n%s", rest[0], usageMain)
			return exitUsage
		}
		return exitOK
	default:
		fmt.Fprintf(stderr, "ringlimit: unknown command %q\n\n%s", cmd, usageMain)
		return exitUsage
	}
}

// parseExit is the exit code of a parse error: 0 for --help.
func parseExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}

// errUsage is wrapped by every error about the command line.
var errUsage = errors.New("usage")

// usageErr writes a command-line error to out and returns it.
func usageErr(out io.Writer, cmd, format string, args ...any) error {
	err := fmt.Errorf("%w: ringlimit %s: %s", errUsage, cmd, fmt.Sprintf(format, args...))
	fmt.Fprintf(out, "ringlimit %s: %s (see ringlimit help %s)\n", cmd, fmt.Sprintf(format, args...), cmd)
	return err
}

// newFlagSet returns a flag set for cmd whose Usage prints head and its
// flags, "--name" style, for --help. Parse it with parseArgs.
func newFlagSet(cmd, head string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("ringlimit "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parseArgs writes the errors
	fs.Usage = func() {
		fmt.Fprint(out, head)
		fs.VisitAll(func(f *flag.Flag) {
			def := ""
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
				def = fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintf(out, "  --%s%s\n      %s\n", f.Name, def, f.Usage)
		})
	}
	return fs
}

// parseArgs parses args with fs, every flag of cmd defined. --help writes
// the usage; a bad value or an unknown flag writes one line that says what
// is wrong and how to write it, instead of the usage.
func parseArgs(fs *flag.FlagSet, cmd string, args []string, out io.Writer) error {
	usage := fs.Usage
	var bad error
	flagvalue.Explain(fs, &bad)
	err := flagvalue.Parse(fs, args, &bad)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		usage()
		return err
	}
	return usageErr(out, cmd, "%v", err)
}
