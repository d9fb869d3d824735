//go:build tools

// Package tools names the kubelet of Kubernetes 1.36, which the feature-gate oracle starts.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubelet"
)
