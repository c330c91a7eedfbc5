//go:build tools

// Package tools pins helm for hack/build-go-tools.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
