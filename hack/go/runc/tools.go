//go:build tools

// Package tools pins runc for hack/build-go-tools (the test bed's flavour 2.4).
package tools

import _ "github.com/opencontainers/runc"
