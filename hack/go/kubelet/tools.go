//go:build tools

// Package tools pins the kubelet for hack/build-go-tools: k8s.io/kubernetes at one release, every k8s.io
// staging module it names replaced by the matching v0.x release (go.mod), since a module that requires
// k8s.io/kubernetes does not see its ./staging replacements.
package tools

import _ "k8s.io/kubernetes/cmd/kubelet"
