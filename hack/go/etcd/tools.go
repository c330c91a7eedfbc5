//go:build tools

// Package tools pins etcd for hack/build-go-tools at the release Kubernetes 1.37 is tested with
// (build/dependencies.yaml of k8s.io/kubernetes v1.37.2).
package tools

import _ "go.etcd.io/etcd/server/v3"
