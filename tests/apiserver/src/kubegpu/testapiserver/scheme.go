package main

import (
	"fmt"
	"net/url"
	"reflect"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// There is no k8s.io/kubernetes here, so there are no internal API types either. The versioned
// k8s.io/api types serve as their own internal ("hub") version: each is registered under both
// v1 and __internal, and conversion between the two is a copy that sets the kind.
var (
	Scheme         = runtime.NewScheme()
	Codecs         = serializer.NewCodecFactory(Scheme)
	ParameterCodec = runtime.NewParameterCodec(Scheme)

	// namerScheme holds the external versions only, so that the OpenAPI
	// x-kubernetes-group-version-kind extensions list real versions.
	namerScheme = runtime.NewScheme()
)

var addToSchemes = []func(*runtime.Scheme) error{
	corev1.AddToScheme,
	appsv1.AddToScheme,
	batchv1.AddToScheme,
	coordinationv1.AddToScheme,
	networkingv1.AddToScheme,
	nodev1.AddToScheme,
	policyv1.AddToScheme,
	rbacv1.AddToScheme,
	schedulingv1.AddToScheme,
}

func init() {
	for _, add := range addToSchemes {
		utilruntime.Must(add(Scheme))
		utilruntime.Must(add(namerScheme))
	}
	for _, gv := range Scheme.PrioritizedVersionsAllGroups() {
		internal := schema.GroupVersion{Group: gv.Group, Version: runtime.APIVersionInternal}
		for kind, t := range Scheme.KnownTypes(gv) {
			// Only the API types; meta's option and watch types have their own internal forms.
			if !strings.HasPrefix(t.PkgPath(), "k8s.io/api/") {
				continue
			}
			obj := reflect.New(t).Interface().(runtime.Object)
			Scheme.AddKnownTypeWithName(internal.WithKind(kind), obj)
			utilruntime.Must(Scheme.AddConversionFunc(obj, obj, copyConversion))
		}
		utilruntime.Must(Scheme.SetVersionPriority(gv))
	}
	// The generic server expects the option types on the empty group's v1 too.
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	Scheme.AddUnversionedTypes(schema.GroupVersion{Group: "", Version: "v1"},
		&metav1.Status{},
		&metav1.APIVersions{},
		&metav1.APIGroupList{},
		&metav1.APIGroup{},
		&metav1.APIResourceList{},
	)
	utilruntime.Must(Scheme.AddConversionFunc((*url.Values)(nil), (*corev1.PodLogOptions)(nil),
		func(a, b interface{}, _ conversion.Scope) error {
			return podLogOptionsFromQuery(*a.(*url.Values), b.(*corev1.PodLogOptions))
		}))
	addDefaultingFuncs(Scheme)
	addFieldLabelConversions(Scheme)
}

func copyConversion(a, b interface{}, _ conversion.Scope) error {
	reflect.ValueOf(b).Elem().Set(reflect.ValueOf(a.(runtime.Object).DeepCopyObject()).Elem())
	return nil
}

// podLogOptionsFromQuery reads the query parameters of pods/log.
func podLogOptionsFromQuery(q url.Values, out *corev1.PodLogOptions) error {
	*out = corev1.PodLogOptions{}
	out.Container = q.Get("container")
	var err error
	parseBool := func(name string) bool {
		v := q.Get(name)
		if v == "" || err != nil {
			return false
		}
		b, perr := strconv.ParseBool(v)
		if perr != nil {
			err = fmt.Errorf("query parameter %s=%q is not a boolean", name, v)
		}
		return b
	}
	parseInt := func(name string) *int64 {
		v := q.Get(name)
		if v == "" || err != nil {
			return nil
		}
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil {
			err = fmt.Errorf("query parameter %s=%q is not an integer", name, v)
			return nil
		}
		return &n
	}
	out.Follow = parseBool("follow")
	out.Previous = parseBool("previous")
	out.Timestamps = parseBool("timestamps")
	out.InsecureSkipTLSVerifyBackend = parseBool("insecureSkipTLSVerifyBackend")
	out.SinceSeconds = parseInt("sinceSeconds")
	out.TailLines = parseInt("tailLines")
	out.LimitBytes = parseInt("limitBytes")
	return err
}
