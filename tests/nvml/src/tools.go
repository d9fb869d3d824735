//go:build tools

// Package tools pins NVIDIA's device plugin and GPU Feature Discovery programs, built from
// github.com/NVIDIA/k8s-device-plugin at the release go.mod requires.
package tools

import (
	_ "github.com/NVIDIA/k8s-device-plugin/cmd/gpu-feature-discovery"
	_ "github.com/NVIDIA/k8s-device-plugin/cmd/nvidia-device-plugin"
)
