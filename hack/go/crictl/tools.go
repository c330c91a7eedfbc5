//go:build tools

// Package tools pins crictl for hack/build-go-tools.
package tools

import _ "sigs.k8s.io/cri-tools/cmd/crictl"
