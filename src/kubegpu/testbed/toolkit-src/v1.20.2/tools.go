//go:build tools

// Package tools names NVIDIA's programs this module builds, so that go.mod and go.sum pin them:
// the container toolkit's commands from github.com/NVIDIA/nvidia-container-toolkit v1.20.2.
package tools

import (
	_ "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook"
	_ "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-container-runtime"
	_ "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-container-runtime-hook"
	_ "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk"
)
