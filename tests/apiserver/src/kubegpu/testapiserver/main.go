// Command kubegpu-test-apiserver is a small Kubernetes API server for kubegpu's tests: upstream's
// generic API server (k8s.io/apiserver) over a real etcd, serving the kinds kubegpu reads and
// writes. It is a test double for a cluster's control plane: there are no controllers, no
// scheduler and no kubelets; tests play those by writing status. See README.md beside build.py.
package main

import (
	"context"
	"encoding/pem"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	utilcompatibility "k8s.io/apiserver/pkg/util/compatibility"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	baseversion "k8s.io/component-base/version"
	"k8s.io/klog/v2"
)

type flags struct {
	etcdServers string
	bindAddress string
	port        int
	certDir     string
	kubeconfig  string
	etcdPrefix  string
}

func main() {
	var f flags
	klog.InitFlags(nil)
	flag.StringVar(&f.etcdServers, "etcd-servers", "http://127.0.0.1:2379", "comma-separated etcd client URLs")
	flag.StringVar(&f.bindAddress, "bind-address", "127.0.0.1", "address to serve HTTPS on (loopback only)")
	flag.IntVar(&f.port, "secure-port", 0, "port to serve HTTPS on; 0 picks a free one")
	flag.StringVar(&f.certDir, "cert-dir", "", "folder for the generated serving certificate and CA (required)")
	flag.StringVar(&f.kubeconfig, "kubeconfig-out", "", "write a kubeconfig for this server here (required)")
	flag.StringVar(&f.etcdPrefix, "etcd-prefix", "/registry", "etcd key prefix")
	versionFlag := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *versionFlag {
		fmt.Println(baseversion.Get().GitVersion)
		return
	}
	if err := run(f); err != nil {
		fmt.Fprintf(os.Stderr, "kubegpu-test-apiserver: %v\n", err)
		os.Exit(1)
	}
}

func run(f flags) error {
	ip := net.ParseIP(f.bindAddress)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--bind-address=%q: only a loopback address is allowed (this server authorizes everyone)", f.bindAddress)
	}
	if f.certDir == "" || f.kubeconfig == "" {
		return fmt.Errorf("--cert-dir and --kubeconfig-out are required")
	}
	listener, err := net.Listen("tcp", net.JoinHostPort(f.bindAddress, fmt.Sprint(f.port)))
	if err != nil {
		return fmt.Errorf("listening on %s:%d: %w", f.bindAddress, f.port, err)
	}
	port := listener.Addr().(*net.TCPAddr).Port

	config := genericapiserver.NewConfig(Codecs)
	config.EffectiveVersion = utilcompatibility.DefaultBuildEffectiveVersion()
	config.EnableProfiling = false

	secure := genericoptions.NewSecureServingOptions()
	secure.BindAddress = ip
	secure.BindPort = port
	secure.Listener = listener
	secure.ServerCert.CertDirectory = f.certDir
	secure.ServerCert.PairName = "apiserver"
	if err := secure.MaybeDefaultWithSelfSignedCerts("localhost", []string{"localhost"}, []net.IP{ip}); err != nil {
		return err
	}
	if err := secure.WithLoopback().ApplyTo(&config.SecureServing, &config.LoopbackClientConfig); err != nil {
		return err
	}

	// Allow-all: every request is an administrator. Safe only because it listens on loopback.
	config.Authentication.Authenticator = authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
		return &authenticator.Response{User: &user.DefaultInfo{
			Name:   "kubegpu-test-admin",
			Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated},
		}}, true, nil
	})
	config.Authorization.Authorizer = authorizerfactory.NewAlwaysAllowAuthorizer()

	namer := openapinamer.NewDefinitionNamer(namerScheme)
	config.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(getDefinitions, namer)
	config.OpenAPIConfig.Info.Title = "kubegpu test API server"
	config.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(getDefinitions, namer)
	config.OpenAPIV3Config.Info.Title = "kubegpu test API server"

	// etcd3 storage (JSON), with the watch cache; no garbage collector runs, so none is enabled.
	backend := storagebackend.NewDefaultConfig(f.etcdPrefix, nil)
	backend.Transport.ServerList = strings.Split(f.etcdServers, ",")
	etcdOptions := genericoptions.NewEtcdOptions(backend)
	etcdOptions.EnableGarbageCollection = false
	etcdOptions.StorageConfig.StorageObjectCountTracker = config.StorageObjectCountTracker
	resourceConfig := serverstorage.NewResourceConfig()
	resourceConfig.EnableVersions(Scheme.PrioritizedVersionsAllGroups()...)
	storageFactory := serverstorage.NewDefaultStorageFactory(
		etcdOptions.StorageConfig, "application/json", Codecs,
		serverstorage.NewDefaultResourceEncodingConfigForEffectiveVersion(Scheme, config.EffectiveVersion),
		resourceConfig, nil)
	if err := etcdOptions.ApplyWithStorageFactoryTo(storageFactory, config); err != nil {
		return err
	}

	stores := map[string]*resourceStore{}
	var namespaced []*resourceStore
	for _, k := range kinds {
		store, err := newStore(k, config.RESTOptionsGetter)
		if err != nil {
			return err
		}
		stores[k.resource] = store
		if k.namespaced {
			namespaced = append(namespaced, store)
		}
	}
	stores["namespaces"].AfterCreate = createDefaultServiceAccount(stores["serviceaccounts"])
	config.AdmissionControl = admission.NewChainHandler(&namespaceLifecycle{namespaces: stores["namespaces"]})

	config.BuildHandlerChainFunc = func(h http.Handler, c *genericapiserver.Config) http.Handler {
		return trimTrailingSlash(genericapiserver.DefaultBuildHandlerChain(h, c))
	}
	server, err := config.Complete(nil).New("kubegpu-test-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return err
	}
	if err := install(server, stores, namespaced); err != nil {
		return err
	}
	server.AddPostStartHookOrDie("kubegpu-bootstrap-objects", func(ctx genericapiserver.PostStartHookContext) error {
		return bootstrap(ctx, stores)
	})
	if err := writeKubeconfig(f, port); err != nil {
		return err
	}
	klog.Infof("serving https://%s:%d, kubeconfig %s", f.bindAddress, port, f.kubeconfig)
	return server.PrepareRun().RunWithContext(genericapiserver.SetupSignalContext())
}

// install puts every kind, and its subresources, into its API group.
func install(server *genericapiserver.GenericAPIServer, stores map[string]*resourceStore, namespaced []*resourceStore) error {
	groups := map[string]*genericapiserver.APIGroupInfo{}
	var order []string
	for _, k := range kinds {
		info, ok := groups[k.gv.Group]
		if !ok {
			g := genericapiserver.NewDefaultAPIGroupInfo(k.gv.Group, Scheme, ParameterCodec, Codecs)
			info = &g
			groups[k.gv.Group] = info
			order = append(order, k.gv.Group)
		}
		resources := info.VersionedResourcesStorageMap[k.gv.Version]
		if resources == nil {
			resources = map[string]rest.Storage{}
			info.VersionedResourcesStorageMap[k.gv.Version] = resources
		}
		store := stores[k.resource]
		if k.resource == "namespaces" {
			resources[k.resource] = &namespaceREST{resourceStore: store, namespaced: namespaced}
		} else {
			resources[k.resource] = store
		}
		if k.hasStatus {
			resources[k.resource+"/status"] = newStatusREST(store)
		}
	}
	core := groups[""].VersionedResourcesStorageMap["v1"]
	core["pods/eviction"] = &evictionREST{pods: stores["pods"], pdbs: stores["poddisruptionbudgets"]}
	core["pods/binding"] = &bindingREST{pods: stores["pods"]}
	core["pods/log"] = &logREST{pods: stores["pods"]}

	if err := server.InstallLegacyAPIGroup(genericapiserver.DefaultLegacyAPIPrefix, groups[""]); err != nil {
		return fmt.Errorf("installing /api: %w", err)
	}
	var named []*genericapiserver.APIGroupInfo
	for _, group := range order {
		if group != "" {
			named = append(named, groups[group])
		}
	}
	if err := server.InstallAPIGroups(named...); err != nil {
		return fmt.Errorf("installing /apis: %w", err)
	}
	return nil
}

// trimTrailingSlash serves /version/, /api/v1/ and the like as /version, /api/v1: the Python
// client asks for the former, which Debian's go-restful does not match. No Kubernetes API path
// but the root ends with a slash, so nothing else changes.
func trimTrailingSlash(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; len(p) > 1 && strings.HasSuffix(p, "/") {
			r.URL.Path = strings.TrimRight(p, "/")
			if r.URL.Path == "" {
				r.URL.Path = "/"
			}
			r.URL.RawPath = ""
			r.RequestURI = r.URL.RequestURI()
		}
		next.ServeHTTP(w, r)
	})
}

// bootstrap creates what a fresh cluster has: the system namespaces and priority classes.
func bootstrap(ctx context.Context, stores map[string]*resourceStore) error {
	reqCtx := genericapirequest.WithNamespace(genericapirequest.NewContext(), "")
	create := func(store *resourceStore, obj runtime.Object) error {
		_, err := store.Create(reqCtx, obj, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
		if err != nil && !errors.IsAlreadyExists(err) {
			return err
		}
		return nil
	}
	for _, name := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		Scheme.Default(ns)
		if err := create(stores["namespaces"], ns); err != nil {
			return fmt.Errorf("creating namespace %s: %w", name, err)
		}
	}
	for name, value := range map[string]int32{"system-node-critical": 2000001000, "system-cluster-critical": 2000000000} {
		pc := &schedulingv1.PriorityClass{
			ObjectMeta:  metav1.ObjectMeta{Name: name},
			Value:       value,
			Description: "Used for system critical pods that must not be moved from their current node.",
		}
		Scheme.Default(pc)
		if err := create(stores["priorityclasses"], pc); err != nil {
			return fmt.Errorf("creating priority class %s: %w", name, err)
		}
	}
	return nil
}

// writeKubeconfig writes (atomically, mode 0600) a kubeconfig that trusts the generated CA.
func writeKubeconfig(f flags, port int) error {
	bundle, err := os.ReadFile(filepath.Join(f.certDir, "apiserver.crt"))
	if err != nil {
		return err
	}
	// The generated file holds the serving certificate, then the CA that signed it.
	var ca []byte
	for rest := bundle; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		ca = pem.EncodeToMemory(block)
	}
	if ca == nil {
		return fmt.Errorf("no certificate in %s", filepath.Join(f.certDir, "apiserver.crt"))
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubegpu-test"] = &clientcmdapi.Cluster{
		Server:                   fmt.Sprintf("https://%s", net.JoinHostPort(f.bindAddress, fmt.Sprint(port))),
		CertificateAuthorityData: ca,
	}
	cfg.AuthInfos["kubegpu-test-admin"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["kubegpu-test"] = &clientcmdapi.Context{Cluster: "kubegpu-test", AuthInfo: "kubegpu-test-admin", Namespace: "default"}
	cfg.CurrentContext = "kubegpu-test"
	tmp := f.kubeconfig + ".tmp"
	if err := clientcmd.WriteToFile(*cfg, tmp); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, f.kubeconfig)
}
