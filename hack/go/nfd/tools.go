//go:build tools

// Package tools pins node-feature-discovery's topology updater for hack/build-go-tools (v0.19.0: the
// newest release the module proxy serves here).
package tools

import _ "sigs.k8s.io/node-feature-discovery/cmd/nfd-topology-updater"
