package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/klog/v2"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// resourceStore is the generic registry Store of one kind, with its discovery extras.
type resourceStore struct {
	*genericregistry.Store
	k *kindInfo
}

func (r *resourceStore) ShortNames() []string    { return r.k.shortNames }
func (r *resourceStore) GetSingularName() string { return r.k.singular }

func newStore(k *kindInfo, optsGetter generic.RESTOptionsGetter) (*resourceStore, error) {
	s := newStrategy(k)
	var deleteStrategy rest.RESTDeleteStrategy = s
	if k.kind == "Pod" {
		deleteStrategy = podStrategy{s}
	}
	store := &genericregistry.Store{
		NewFunc:                   k.newObj,
		NewListFunc:               k.newList,
		DefaultQualifiedResource:  k.groupResource(),
		SingularQualifiedResource: schema.GroupResource{Group: k.gv.Group, Resource: k.singular},
		CreateStrategy:            s,
		UpdateStrategy:            s,
		DeleteStrategy:            deleteStrategy,
		ResetFieldsStrategy:       s,
		ReturnDeletedObject:       k.kind == "Pod",
		TableConvertor:            rest.NewDefaultTableConvertor(k.groupResource()),
	}
	options := &generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: k.attrFunc}
	if err := store.CompleteWithOptions(options); err != nil {
		return nil, fmt.Errorf("store for %s: %w", k.resource, err)
	}
	return &resourceStore{Store: store, k: k}, nil
}

// statusREST serves <resource>/status from a copy of the main store with the status strategy.
type statusREST struct {
	store *genericregistry.Store
}

func newStatusREST(main *resourceStore) *statusREST {
	status := *main.Store
	ss := statusStrategy{newStrategy(main.k)}
	status.CreateStrategy = nil
	status.DeleteStrategy = nil
	status.UpdateStrategy = ss
	status.ResetFieldsStrategy = ss
	return &statusREST{store: &status}
}

func (r *statusREST) New() runtime.Object { return r.store.New() }
func (r *statusREST) Destroy()            {}
func (r *statusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}
func (r *statusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo,
	createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc,
	_ bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	// Status updates never create.
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}
func (r *statusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}
func (r *statusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}

// namespaceREST: there is no namespace controller, so deleting a namespace deletes everything
// in it at once (no Terminating phase), and the system namespaces cannot be deleted.
type namespaceREST struct {
	*resourceStore
	namespaced []*resourceStore
}

var systemNamespaces = map[string]bool{"default": true, "kube-system": true, "kube-public": true}

func (r *namespaceREST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	if systemNamespaces[name] {
		return nil, false, errors.NewForbidden(r.k.groupResource(), name,
			fmt.Errorf("this namespace may not be deleted"))
	}
	if _, err := r.Get(ctx, name, &metav1.GetOptions{}); err != nil {
		return nil, false, err
	}
	if options == nil || len(options.DryRun) == 0 {
		zero := int64(0)
		nsCtx := genericapirequest.WithNamespace(ctx, name)
		for _, store := range r.namespaced {
			if _, err := store.DeleteCollection(nsCtx, rest.ValidateAllObjectFunc,
				&metav1.DeleteOptions{GracePeriodSeconds: &zero}, &metainternalversion.ListOptions{}); err != nil {
				return nil, false, err
			}
		}
	}
	return r.resourceStore.Delete(ctx, name, deleteValidation, options)
}

// evictionREST serves pods/eviction, with upstream's PodDisruptionBudget rules: no controller
// maintains budgets here, so a budget's status must be written by whoever plays the disruption
// controller (a budget not yet observed, or with no disruptions allowed, refuses with 429).
type evictionREST struct {
	pods *resourceStore
	pdbs *resourceStore
}

func (r *evictionREST) New() runtime.Object { return &policyv1.Eviction{} }
func (r *evictionREST) Destroy()            {}
func (r *evictionREST) GroupVersionKind(schema.GroupVersion) schema.GroupVersionKind {
	return policyv1.SchemeGroupVersion.WithKind("Eviction")
}

func (r *evictionREST) Create(ctx context.Context, name string, obj runtime.Object,
	createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	eviction, ok := obj.(*policyv1.Eviction)
	if !ok {
		return nil, errors.NewBadRequest(fmt.Sprintf("not an Eviction: %T", obj))
	}
	if eviction.Name != "" && eviction.Name != name {
		return nil, errors.NewBadRequest("name in URL does not match name in Eviction object")
	}
	if createValidation != nil {
		if err := createValidation(ctx, eviction.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	deleteOptions := eviction.DeleteOptions
	if deleteOptions == nil {
		deleteOptions = &metav1.DeleteOptions{}
	}
	if options != nil && len(options.DryRun) > 0 {
		deleteOptions.DryRun = options.DryRun
	}
	obj, err := r.pods.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	pod := obj.(*corev1.Pod)
	ignoreBudget := pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded ||
		pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodPending
	if !ignoreBudget {
		if err := r.takeDisruption(ctx, pod, len(deleteOptions.DryRun) > 0); err != nil {
			return nil, err
		}
	}
	if _, _, err := r.pods.Delete(ctx, name, rest.ValidateAllObjectFunc, deleteOptions); err != nil {
		return nil, err
	}
	return &metav1.Status{Status: metav1.StatusSuccess}, nil
}

func (r *evictionREST) takeDisruption(ctx context.Context, pod *corev1.Pod, dryRun bool) error {
	list, err := r.pdbs.List(ctx, &metainternalversion.ListOptions{})
	if err != nil {
		return err
	}
	var matching []*policyv1.PodDisruptionBudget
	for i := range list.(*policyv1.PodDisruptionBudgetList).Items {
		pdb := &list.(*policyv1.PodDisruptionBudgetList).Items[i]
		if pdb.Spec.Selector == nil {
			continue
		}
		selector, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || !selector.Matches(labels.Set(pod.Labels)) {
			continue
		}
		matching = append(matching, pdb)
	}
	if len(matching) == 0 {
		return nil
	}
	if len(matching) > 1 {
		return errors.NewInternalError(fmt.Errorf(
			"This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."))
	}
	pdb := matching[0]
	tooMany := func() error {
		err := errors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
			Type: policyv1.DisruptionBudgetCause,
			Message: fmt.Sprintf("The disruption budget %s needs %d healthy pods and has %d currently",
				pdb.Name, pdb.Status.DesiredHealthy, pdb.Status.CurrentHealthy),
		})
		return err
	}
	if pdb.Status.ObservedGeneration < pdb.Generation || pdb.Status.DisruptionsAllowed <= 0 {
		return tooMany()
	}
	if dryRun {
		return nil
	}
	key, err := r.pdbs.KeyFunc(genericapirequest.WithNamespace(ctx, pdb.Namespace), pdb.Name)
	if err != nil {
		return err
	}
	out := &policyv1.PodDisruptionBudget{}
	preconditions := &storage.Preconditions{UID: &pdb.UID, ResourceVersion: &pdb.ResourceVersion}
	err = r.pdbs.Storage.GuaranteedUpdate(ctx, key, out, false, preconditions,
		func(input runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
			current := input.(*policyv1.PodDisruptionBudget).DeepCopy()
			current.Status.DisruptionsAllowed--
			if current.Status.DisruptedPods == nil {
				current.Status.DisruptedPods = map[string]metav1.Time{}
			}
			current.Status.DisruptedPods[pod.Name] = metav1.Time{Time: time.Now()}
			return current, nil, nil
		}, false, nil)
	if errors.IsConflict(err) {
		return errors.NewTooManyRequests("The disruption budget changed while evicting; try again.", 1)
	}
	return err
}

// bindingREST serves pods/binding, which is how a scheduler (or a test playing one) assigns a pod
// to a node.
type bindingREST struct {
	pods *resourceStore
}

func (r *bindingREST) New() runtime.Object { return &corev1.Binding{} }
func (r *bindingREST) Destroy()            {}

func (r *bindingREST) Create(ctx context.Context, name string, obj runtime.Object,
	createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	binding := obj.(*corev1.Binding)
	if binding.Name != "" && binding.Name != name {
		return nil, errors.NewBadRequest("name in URL does not match name in Binding object")
	}
	if binding.Target.Kind != "" && binding.Target.Kind != "Node" {
		return nil, errors.NewInvalid(schema.GroupKind{Kind: "Binding"}, name, nil)
	}
	if binding.Target.Name == "" {
		return nil, errors.NewBadRequest("binding target name is required")
	}
	if createValidation != nil {
		if err := createValidation(ctx, binding.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	if options != nil && len(options.DryRun) > 0 {
		return &metav1.Status{Status: metav1.StatusSuccess}, nil
	}
	key, err := r.pods.KeyFunc(ctx, name)
	if err != nil {
		return nil, err
	}
	out := &corev1.Pod{}
	err = r.pods.Storage.GuaranteedUpdate(ctx, key, out, false, nil,
		func(input runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
			pod := input.(*corev1.Pod).DeepCopy()
			if pod.DeletionTimestamp != nil {
				return nil, nil, errors.NewConflict(r.pods.k.groupResource(), name, fmt.Errorf("pod %s is being deleted, cannot be assigned to a host", name))
			}
			if pod.Spec.NodeName != "" {
				return nil, nil, errors.NewConflict(r.pods.k.groupResource(), name, fmt.Errorf("pod %v is already assigned to node %q", name, pod.Spec.NodeName))
			}
			pod.Spec.NodeName = binding.Target.Name
			pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{
				Type: corev1.PodScheduled, Status: corev1.ConditionTrue,
				LastTransitionTime: metav1.Now(),
			})
			return pod, nil, nil
		}, false, nil)
	if err != nil {
		return nil, err
	}
	return &metav1.Status{Status: metav1.StatusSuccess}, nil
}

// LogAnnotation is the test double's stand-in for a container log: there is no kubelet to ask,
// so pods/log returns this annotation's value (tests that play the kubelet write it).
const LogAnnotation = "apiserver.kubegpu.test/log"

type logREST struct {
	pods *resourceStore
}

func (r *logREST) New() runtime.Object { return &corev1.Pod{} }
func (r *logREST) Destroy()            {}
func (r *logREST) ProducesMIMETypes(string) []string {
	return []string{"text/plain"}
}
func (r *logREST) ProducesObject(string) interface{} { return "" }
func (r *logREST) NewGetOptions() (runtime.Object, bool, string) {
	return &corev1.PodLogOptions{}, false, ""
}

func (r *logREST) Get(ctx context.Context, name string, opts runtime.Object) (runtime.Object, error) {
	options, ok := opts.(*corev1.PodLogOptions)
	if !ok {
		return nil, errors.NewBadRequest(fmt.Sprintf("invalid options object: %#v", opts))
	}
	obj, err := r.pods.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	pod := obj.(*corev1.Pod)
	if options.Container != "" {
		found := false
		for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
			found = found || c.Name == options.Container
		}
		if !found {
			return nil, errors.NewBadRequest(fmt.Sprintf("container %s is not valid for pod %s", options.Container, name))
		}
	} else if len(pod.Spec.Containers) > 1 {
		return nil, errors.NewBadRequest(fmt.Sprintf("a container name must be specified for pod %s", name))
	}
	text := pod.Annotations[LogAnnotation]
	if options.TailLines != nil {
		lines := strings.SplitAfter(text, "\n")
		if len(lines) > 0 && lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		if n := int(*options.TailLines); n < len(lines) {
			lines = lines[len(lines)-n:]
		}
		text = strings.Join(lines, "")
	}
	if options.LimitBytes != nil && int64(len(text)) > *options.LimitBytes {
		text = text[:*options.LimitBytes]
	}
	return &textStream{text: text}, nil
}

// textStream is a rest.ResourceStreamer over a fixed text.
type textStream struct {
	metav1.TypeMeta
	text string
}

func (t *textStream) DeepCopyObject() runtime.Object { c := *t; return &c }
func (t *textStream) InputStream(context.Context, string, string) (io.ReadCloser, bool, string, error) {
	return io.NopCloser(strings.NewReader(t.text)), false, "text/plain", nil
}

// namespaceLifecycle is upstream's NamespaceLifecycle admission, for creation: nothing can be
// created in a namespace that does not exist.
type namespaceLifecycle struct {
	namespaces *resourceStore
}

func (p *namespaceLifecycle) Handles(op admission.Operation) bool { return op == admission.Create }

func (p *namespaceLifecycle) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetNamespace() == "" || a.GetSubresource() != "" ||
		(a.GetKind().Group == "" && a.GetKind().Kind == "Namespace") {
		return nil
	}
	if _, err := p.namespaces.Get(genericapirequest.NewContext(), a.GetNamespace(), &metav1.GetOptions{}); err != nil {
		if errors.IsNotFound(err) {
			return errors.NewNotFound(p.namespaces.k.groupResource(), a.GetNamespace())
		}
		return errors.NewInternalError(err)
	}
	return nil
}

// createDefaultServiceAccount plays the service account controller for a new namespace.
func createDefaultServiceAccount(sas *resourceStore) genericregistry.AfterCreateFunc {
	return func(obj runtime.Object, options *metav1.CreateOptions) {
		if options != nil && len(options.DryRun) > 0 {
			return
		}
		ns := obj.(*corev1.Namespace)
		ctx := genericapirequest.WithNamespace(genericapirequest.NewContext(), ns.Name)
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns.Name}}
		if _, err := sas.Create(ctx, sa, nil, &metav1.CreateOptions{}); err != nil && !errors.IsAlreadyExists(err) {
			klog.Errorf("creating the default service account in %s: %v", ns.Name, err)
		}
	}
}
