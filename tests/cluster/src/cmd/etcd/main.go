// Command etcd is etcd's own server (go.etcd.io/etcd/server/v3/etcdmain) at the release
// Kubernetes' go.mod pins, built in this module so the control plane needs nothing else.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
