// Package nvfm is kubegpu's test double of NVIDIA's Fabric Manager bindings
// (github.com/NVIDIA/go-nvfm), which the Go module proxy does not serve. It
// offers only what sigs.k8s.io/dra-driver-nvidia-gpu/pkg/fabricmanager calls,
// and every call answers that the Fabric Manager library is not there: the
// test nodes have no NVSwitch fabric, and NVIDIA's GPU kubelet plugin opens
// Fabric Manager only on nodes that have one. [KUBEGPU_SIMULATED]
package nvfm

// Return is a Fabric Manager status code.
type Return int32

const (
	// SUCCESS is FM_ST_SUCCESS.
	SUCCESS Return = 0
	// ERROR_LIBRARY_NOT_FOUND is what every call of the double answers.
	ERROR_LIBRARY_NOT_FOUND Return = -1000
)

func (r Return) String() string {
	if r == SUCCESS {
		return "SUCCESS"
	}
	return "Fabric Manager library not available (kubegpu's go-nvfm test double) [KUBEGPU_SIMULATED]"
}

// FabricPartitionId names a fabric partition.
type FabricPartitionId uint32

// FabricPartitionGpuInfo is one GPU of a partition.
type FabricPartitionGpuInfo struct {
	PhysicalId          uint32
	Uuid                [80]int8
	PciBusId            [32]int8
	NumNvLinksAvailable uint32
	MaxNumNvLinks       uint32
	NvlinkLineRateMBps  uint32
}

// FabricPartitionInfo is one partition.
type FabricPartitionInfo struct {
	PartitionId uint32
	IsActive    uint32
	NumGpus     uint32
	GpuInfo     [8]FabricPartitionGpuInfo
}

// FabricPartitionList is what GetSupportedFabricPartitions answers.
type FabricPartitionList struct {
	NumPartitions uint32
	PartitionInfo [64]FabricPartitionInfo
}

// LibraryOption configures New.
type LibraryOption func(*library)

// ConnectOption configures Connect.
type ConnectOption func(*connection)

type library struct{ path string }

type connection struct {
	address string
	socket  bool
	timeout uint32
}

// WithLibraryPath names the Fabric Manager library to load.
func WithLibraryPath(path string) LibraryOption { return func(l *library) { l.path = path } }

// WithUnixSocket connects through a Unix socket.
func WithUnixSocket(path string) ConnectOption {
	return func(c *connection) { c.address, c.socket = path, true }
}

// WithAddress connects to a TCP address.
func WithAddress(address string) ConnectOption {
	return func(c *connection) { c.address = address }
}

// WithTimeoutMs sets the connection's timeout.
func WithTimeoutMs(ms uint32) ConnectOption { return func(c *connection) { c.timeout = ms } }

// Handle is a connection to Fabric Manager.
type Handle interface {
	Disconnect() Return
	GetSupportedFabricPartitions() (FabricPartitionList, Return)
	ActivateFabricPartition(FabricPartitionId) Return
	DeactivateFabricPartition(FabricPartitionId) Return
}

// Interface is the library.
type Interface interface {
	Init() Return
	Shutdown() Return
	Connect(...ConnectOption) (Handle, Return)
}

type absent struct{}

// New returns the library; every call of it fails.
func New(opts ...LibraryOption) Interface {
	l := &library{}
	for _, opt := range opts {
		opt(l)
	}
	return absent{}
}

func (absent) Init() Return     { return ERROR_LIBRARY_NOT_FOUND }
func (absent) Shutdown() Return { return ERROR_LIBRARY_NOT_FOUND }

func (absent) Connect(opts ...ConnectOption) (Handle, Return) {
	return nil, ERROR_LIBRARY_NOT_FOUND
}
