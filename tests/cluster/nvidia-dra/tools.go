//go:build tools

// Package tools pins NVIDIA's DRA driver for GPUs' kubelet plugin, built from
// sigs.k8s.io/dra-driver-nvidia-gpu at the release go.mod requires (kubegpu's deployment pin).
package tools

import (
	_ "sigs.k8s.io/dra-driver-nvidia-gpu/cmd/gpu-kubelet-plugin"
)
