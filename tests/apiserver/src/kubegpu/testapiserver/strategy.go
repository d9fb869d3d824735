package main

import (
	"context"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// kindInfo describes one served resource: what the generic strategy needs to know about it.
type kindInfo struct {
	gv         schema.GroupVersion
	kind       string
	resource   string
	singular   string
	shortNames []string
	namespaced bool
	newObj     func() runtime.Object
	newList    func() runtime.Object

	// hasStatus: a status subresource exists; the main resource then ignores status changes
	// and /status ignores everything but status (and metadata).
	hasStatus bool
	// keepStatusOnCreate: status given at creation is kept (nodes register with their status).
	keepStatusOnCreate bool
	// nameFn validates metadata.name; DNS-1123 subdomain when nil.
	nameFn apimachineryvalidation.ValidateNameFunc

	prepareCreate  func(obj runtime.Object)
	validate       func(obj runtime.Object) field.ErrorList
	validateUpdate func(obj, old runtime.Object) field.ErrorList
	validateStatus func(obj runtime.Object) field.ErrorList
	// selectableFields adds kind-specific field selector values beyond metadata.name/namespace.
	selectableFields func(obj runtime.Object) fields.Set
	// fieldLabels lists the field selector labels accepted beyond metadata.name/namespace.
	fieldLabels []string
}

func (k *kindInfo) groupResource() schema.GroupResource {
	return schema.GroupResource{Group: k.gv.Group, Resource: k.resource}
}

// strategy is the create/update/delete strategy shared by every kind.
type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
	k *kindInfo
}

func newStrategy(k *kindInfo) strategy {
	return strategy{ObjectTyper: Scheme, NameGenerator: names.SimpleNameGenerator, k: k}
}

func (s strategy) NamespaceScoped() bool          { return s.k.namespaced }
func (s strategy) AllowCreateOnUpdate() bool      { return false }
func (s strategy) AllowUnconditionalUpdate() bool { return true }
func (s strategy) Canonicalize(runtime.Object)    {}

func (s strategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }
func (s strategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

func structField(obj runtime.Object, name string) (reflect.Value, bool) {
	v := reflect.ValueOf(obj).Elem().FieldByName(name)
	return v, v.IsValid()
}

func (s strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	if s.k.hasStatus && !s.k.keepStatusOnCreate {
		if status, ok := structField(obj, "Status"); ok {
			status.Set(reflect.Zero(status.Type()))
		}
	}
	if _, ok := structField(obj, "Spec"); ok {
		mustAccessor(obj).SetGeneration(1)
	}
	if s.k.prepareCreate != nil {
		s.k.prepareCreate(obj)
	}
}

func (s strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	if s.k.hasStatus {
		if status, ok := structField(obj, "Status"); ok {
			oldStatus, _ := structField(old, "Status")
			status.Set(oldStatus)
		}
	}
	bumpGeneration(obj, old)
}

// bumpGeneration increments metadata.generation when the spec changed (kinds with a spec).
func bumpGeneration(obj, old runtime.Object) {
	spec, ok := structField(obj, "Spec")
	if !ok {
		return
	}
	oldSpec, _ := structField(old, "Spec")
	generation := mustAccessor(old).GetGeneration()
	if !apiequality.Semantic.DeepEqual(spec.Interface(), oldSpec.Interface()) {
		generation++
	}
	mustAccessor(obj).SetGeneration(generation)
}

func mustAccessor(obj runtime.Object) metav1.Object {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		panic(err)
	}
	return accessor
}

func (s strategy) validateMeta(obj runtime.Object) field.ErrorList {
	nameFn := s.k.nameFn
	if nameFn == nil {
		nameFn = apimachineryvalidation.NameIsDNSSubdomain
	}
	return apimachineryvalidation.ValidateObjectMetaAccessor(
		mustAccessor(obj), s.k.namespaced, nameFn, field.NewPath("metadata"))
}

func (s strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	errs := s.validateMeta(obj)
	if s.k.validate != nil {
		errs = append(errs, s.k.validate(obj)...)
	}
	return errs
}

func (s strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaAccessorUpdate(
		mustAccessor(obj), mustAccessor(old), field.NewPath("metadata"))
	errs = append(errs, s.validateMeta(obj)...)
	if s.k.validate != nil {
		errs = append(errs, s.k.validate(obj)...)
	}
	if s.k.validateUpdate != nil {
		errs = append(errs, s.k.validateUpdate(obj, old)...)
	}
	return errs
}

// GetResetFields tells server-side apply which fields this endpoint ignores.
func (s strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	if !s.k.hasStatus {
		return nil
	}
	return map[fieldpath.APIVersion]*fieldpath.Set{
		fieldpath.APIVersion(s.k.gv.String()): fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

// statusStrategy serves the status subresource: only status (and metadata) may change.
type statusStrategy struct{ strategy }

func (s statusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	if spec, ok := structField(obj, "Spec"); ok {
		oldSpec, _ := structField(old, "Spec")
		spec.Set(oldSpec)
	}
	mustAccessor(obj).SetGeneration(mustAccessor(old).GetGeneration())
	if pod, ok := obj.(*corev1.Pod); ok {
		// As upstream: the status endpoint neither deletes nor re-parents a pod.
		oldPod := old.(*corev1.Pod)
		pod.DeletionTimestamp = oldPod.DeletionTimestamp
		pod.OwnerReferences = oldPod.OwnerReferences
	}
}

func (s statusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaAccessorUpdate(
		mustAccessor(obj), mustAccessor(old), field.NewPath("metadata"))
	if s.k.validateStatus != nil {
		errs = append(errs, s.k.validateStatus(obj)...)
	}
	return errs
}

func (s statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	if _, ok := structField(s.k.newObj(), "Spec"); !ok {
		return nil
	}
	return map[fieldpath.APIVersion]*fieldpath.Set{
		fieldpath.APIVersion(s.k.gv.String()): fieldpath.NewSet(fieldpath.MakePathOrDie("spec")),
	}
}

// podStrategy adds upstream's graceful deletion of pods: a pod bound to a node is only marked
// for deletion (deletionTimestamp), and goes when its kubelet, or a test playing it, deletes it
// again with a grace period of 0. Unscheduled and finished pods go at once.
type podStrategy struct{ strategy }

func (podStrategy) CheckGracefulDelete(_ context.Context, obj runtime.Object, options *metav1.DeleteOptions) bool {
	if options == nil {
		return false
	}
	pod := obj.(*corev1.Pod)
	var period int64
	switch {
	case options.GracePeriodSeconds != nil:
		period = *options.GracePeriodSeconds
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		period = *pod.Spec.TerminationGracePeriodSeconds
	}
	if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		period = 0
	}
	options.GracePeriodSeconds = &period
	return true
}

// attrFunc returns the labels and the selectable fields of an object of this kind.
func (k *kindInfo) attrFunc(obj runtime.Object) (labels.Set, fields.Set, error) {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil, err
	}
	objectMeta := metav1.ObjectMeta{Name: accessor.GetName(), Namespace: accessor.GetNamespace()}
	set := generic.ObjectMetaFieldsSet(&objectMeta, k.namespaced)
	if k.selectableFields != nil {
		set = generic.MergeFieldsSets(set, k.selectableFields(obj))
	}
	return labels.Set(accessor.GetLabels()), set, nil
}
