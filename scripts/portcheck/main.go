// Command portcheck tells whether ports are free to listen on, so that
// scripts/cluster.sh can refuse to start a cluster on ports something else
// holds, instead of reporting another cluster's readiness as its own.
//
//	portcheck 127.0.0.1 tcp:7101 tcp:8101 tcp:7946 udp:7946
//
// It binds each port and lets it go at once. It exits 0 when every port was
// free, 1 naming the first port that is taken (and by what error), and 2 on
// a bad command line.
package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run checks the ports of args (a host, then proto:port pairs) and returns
// the exit code, writing what is taken or wrong to stderr.
func run(args []string, stderr io.Writer) int {
	if len(args) < 2 {
		fmt.Fprintln(stderr, "usage: portcheck HOST tcp:PORT|udp:PORT ...")
		return 2
	}
	host := args[0]
	for _, a := range args[1:] {
		proto, port, ok := strings.Cut(a, ":")
		if n, err := strconv.Atoi(port); !ok || err != nil || n < 1 || n > 65535 || (proto != "tcp" && proto != "udp") {
			fmt.Fprintf(stderr, "portcheck: %q: want tcp:PORT or udp:PORT, PORT from 1 to 65535\n", a)
			return 2
		}
		if err := free(proto, net.JoinHostPort(host, port)); err != nil {
			fmt.Fprintf(stderr, "%s %s is taken: %v\n", proto, net.JoinHostPort(host, port), err)
			return 1
		}
	}
	return 0
}

// free binds addr with proto and releases it.
func free(proto, addr string) error {
	if proto == "udp" {
		c, err := net.ListenPacket("udp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return l.Close()
}
