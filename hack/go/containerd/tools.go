//go:build tools

// Package tools pins containerd, its runc shim and ctr for hack/build-go-tools (the test bed's flavour 2.4).
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
