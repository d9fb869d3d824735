//go:build tools

// Package tools pins node-feature-discovery's master and worker, built from
// sigs.k8s.io/node-feature-discovery at the release go.mod requires (kubegpu's deployment pin).
package tools

import (
	_ "sigs.k8s.io/node-feature-discovery/cmd/nfd-master"
	_ "sigs.k8s.io/node-feature-discovery/cmd/nfd-worker"
)
