//go:build tools

package main

import (
	_ "github.com/envoyproxy/ratelimit/src/service_cmd"
	_ "github.com/gubernator-io/gubernator/v2/cmd/gubernator"
)
