//go:build tools

// Package tools pins the control plane and kubectl for hack/build-go-tools: k8s.io/kubernetes at the
// kubelet's release, every k8s.io staging module it names replaced by the matching v0.x release (go.mod).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
