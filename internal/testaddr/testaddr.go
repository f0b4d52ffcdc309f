// Package testaddr gives tests loopback addresses with known properties.
package testaddr

import (
	"net"
	"testing"
)

// Closed returns a loopback TCP address ("127.0.0.1:port") where nothing
// listens: a port the OS just handed out and that was closed at once. A
// dial to it is refused (unless another process takes the port meanwhile,
// which the OS makes unlikely by not reusing a port at once).
func Closed(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
