package main

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// A subset of upstream's validation: the rules that manifests for GPU nodes and their cluster
// add-ons are likely to break (names, labels, taints, resource names and quantities, extended
// resources, selectors versus template labels, immutable fields). Messages follow upstream's.

var (
	standardContainerResources = sets.New("cpu", "memory", "ephemeral-storage")
	standardQuotaResources     = sets.New(
		"pods", "services", "replicationcontrollers", "resourcequotas", "secrets", "configmaps",
		"persistentvolumeclaims", "services.nodeports", "services.loadbalancers",
		"cpu", "memory", "ephemeral-storage", "storage",
		"requests.cpu", "requests.memory", "requests.storage", "requests.ephemeral-storage",
		"limits.cpu", "limits.memory", "limits.ephemeral-storage",
	)
	taintEffects = sets.New(string(corev1.TaintEffectNoSchedule),
		string(corev1.TaintEffectPreferNoSchedule), string(corev1.TaintEffectNoExecute))
	protocols = sets.New(string(corev1.ProtocolTCP), string(corev1.ProtocolUDP), string(corev1.ProtocolSCTP))
)

func qualifiedNameErrors(value string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range content.IsLabelKey(value) {
		errs = append(errs, field.Invalid(path, value, msg))
	}
	return errs
}

func dnsLabelErrors(value string, path *field.Path) field.ErrorList {
	if value == "" {
		return field.ErrorList{field.Required(path, "")}
	}
	var errs field.ErrorList
	for _, msg := range utilvalidation.IsDNS1123Label(value) {
		errs = append(errs, field.Invalid(path, value, msg))
	}
	return errs
}

func isExtendedResource(name string) bool {
	return strings.Contains(name, "/") && !strings.HasPrefix(name, corev1.ResourceDefaultNamespacePrefix) &&
		!strings.HasPrefix(name, "requests.")
}

func isHugePages(name string) bool { return strings.HasPrefix(name, corev1.ResourceHugePagesPrefix) }

// validateResourceName: a standard name, hugepages-<size>, or a domain-prefixed (extended) name.
func validateResourceName(name string, path *field.Path) field.ErrorList {
	errs := qualifiedNameErrors(name, path)
	if len(errs) == 0 && !strings.Contains(name, "/") && !standardContainerResources.Has(name) && !isHugePages(name) {
		errs = append(errs, field.Invalid(path, name, "must be a standard resource type or fully qualified"))
	}
	return errs
}

func validateQuantity(q resource.Quantity, path *field.Path) field.ErrorList {
	if q.Sign() < 0 {
		return field.ErrorList{field.Invalid(path, q.String(), "must be greater than or equal to 0")}
	}
	return nil
}

func validateResourceList(list corev1.ResourceList, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for name, q := range list {
		p := path.Key(string(name))
		errs = append(errs, validateResourceName(string(name), p)...)
		errs = append(errs, validateQuantity(q, p)...)
		if isExtendedResource(string(name)) && q.MilliValue()%1000 != 0 {
			errs = append(errs, field.Invalid(p, q.String(), "must be an integer"))
		}
	}
	return errs
}

func validateResources(r corev1.ResourceRequirements, path *field.Path) field.ErrorList {
	errs := validateResourceList(r.Limits, path.Child("limits"))
	errs = append(errs, validateResourceList(r.Requests, path.Child("requests"))...)
	for name, request := range r.Requests {
		p := path.Child("requests").Key(string(name))
		limit, hasLimit := r.Limits[name]
		if isExtendedResource(string(name)) || isHugePages(string(name)) {
			if !hasLimit {
				errs = append(errs, field.Forbidden(p, "Limit must be set for non overcommitable resources"))
			} else if limit.Cmp(request) != 0 {
				errs = append(errs, field.Invalid(p, request.String(), "must be equal to "+string(name)+" limit of "+limit.String()))
			}
		} else if hasLimit && request.Cmp(limit) > 0 {
			errs = append(errs, field.Invalid(p, request.String(), "must be less than or equal to "+string(name)+" limit of "+limit.String()))
		}
	}
	return errs
}

func validateContainers(containers []corev1.Container, path *field.Path, required bool) field.ErrorList {
	var errs field.ErrorList
	if required && len(containers) == 0 {
		errs = append(errs, field.Required(path, ""))
	}
	seen := sets.New[string]()
	for i, c := range containers {
		p := path.Index(i)
		errs = append(errs, dnsLabelErrors(c.Name, p.Child("name"))...)
		if seen.Has(c.Name) {
			errs = append(errs, field.Duplicate(p.Child("name"), c.Name))
		}
		seen.Insert(c.Name)
		if strings.TrimSpace(c.Image) == "" {
			errs = append(errs, field.Required(p.Child("image"), ""))
		}
		for j, port := range c.Ports {
			pp := p.Child("ports").Index(j)
			if port.ContainerPort < 1 || port.ContainerPort > 65535 {
				errs = append(errs, field.Invalid(pp.Child("containerPort"), port.ContainerPort, "must be between 1 and 65535, inclusive"))
			}
			if !protocols.Has(string(port.Protocol)) {
				errs = append(errs, field.NotSupported(pp.Child("protocol"), port.Protocol, sets.List(protocols)))
			}
		}
		errs = append(errs, validateResources(c.Resources, p.Child("resources"))...)
	}
	return errs
}

func validateTolerations(tolerations []corev1.Toleration, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, t := range tolerations {
		p := path.Index(i)
		if t.Key != "" {
			errs = append(errs, qualifiedNameErrors(t.Key, p.Child("key"))...)
		}
		switch t.Operator {
		case corev1.TolerationOpEqual, "":
		case corev1.TolerationOpExists:
			if t.Value != "" {
				errs = append(errs, field.Invalid(p.Child("operator"), t.Value, "value must be empty when `operator` is 'Exists'"))
			}
		default:
			errs = append(errs, field.NotSupported(p.Child("operator"), t.Operator, []string{"Equal", "Exists"}))
		}
		if t.Key == "" && t.Operator != corev1.TolerationOpExists {
			errs = append(errs, field.Invalid(p.Child("operator"), t.Operator, "operator must be Exists when `key` is empty, which means \"match all values and all keys\""))
		}
		if t.Effect != "" && !taintEffects.Has(string(t.Effect)) {
			errs = append(errs, field.NotSupported(p.Child("effect"), t.Effect, sets.List(taintEffects)))
		}
	}
	return errs
}

func validatePodSpec(spec *corev1.PodSpec, path *field.Path) field.ErrorList {
	errs := validateContainers(spec.Containers, path.Child("containers"), true)
	errs = append(errs, validateContainers(spec.InitContainers, path.Child("initContainers"), false)...)
	switch spec.RestartPolicy {
	case corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever:
	default:
		errs = append(errs, field.NotSupported(path.Child("restartPolicy"), spec.RestartPolicy, []string{"Always", "Never", "OnFailure"}))
	}
	errs = append(errs, metav1validation.ValidateLabels(spec.NodeSelector, path.Child("nodeSelector"))...)
	errs = append(errs, validateTolerations(spec.Tolerations, path.Child("tolerations"))...)
	volumes := sets.New[string]()
	for i, v := range spec.Volumes {
		p := path.Child("volumes").Index(i).Child("name")
		errs = append(errs, dnsLabelErrors(v.Name, p)...)
		if volumes.Has(v.Name) {
			errs = append(errs, field.Duplicate(p, v.Name))
		}
		volumes.Insert(v.Name)
	}
	if spec.RuntimeClassName != nil {
		errs = append(errs, dnsLabelErrors(*spec.RuntimeClassName, path.Child("runtimeClassName"))...)
	}
	return errs
}

func validatePod(obj runtime.Object) field.ErrorList {
	pod := obj.(*corev1.Pod)
	return validatePodSpec(&pod.Spec, field.NewPath("spec"))
}

// validatePodUpdate: as upstream, a pod's spec is immutable but for a few fields.
func validatePodUpdate(obj, old runtime.Object) field.ErrorList {
	pod, oldPod := obj.(*corev1.Pod), old.(*corev1.Pod)
	mutable := pod.Spec.DeepCopy()
	for i := range mutable.Containers {
		if i < len(oldPod.Spec.Containers) {
			mutable.Containers[i].Image = oldPod.Spec.Containers[i].Image
		}
	}
	for i := range mutable.InitContainers {
		if i < len(oldPod.Spec.InitContainers) {
			mutable.InitContainers[i].Image = oldPod.Spec.InitContainers[i].Image
		}
	}
	mutable.ActiveDeadlineSeconds = oldPod.Spec.ActiveDeadlineSeconds
	mutable.TerminationGracePeriodSeconds = oldPod.Spec.TerminationGracePeriodSeconds
	mutable.SchedulingGates = oldPod.Spec.SchedulingGates
	if len(pod.Spec.Tolerations) >= len(oldPod.Spec.Tolerations) &&
		apiequality.Semantic.DeepEqual(pod.Spec.Tolerations[:len(oldPod.Spec.Tolerations)], oldPod.Spec.Tolerations) {
		mutable.Tolerations = oldPod.Spec.Tolerations // additions only
	}
	if !apiequality.Semantic.DeepEqual(mutable, &oldPod.Spec) {
		return field.ErrorList{field.Forbidden(field.NewPath("spec"),
			"pod updates may not change fields other than `spec.containers[*].image`, "+
				"`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, "+
				"`spec.tolerations` (only additions to existing tolerations), "+
				"`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)")}
	}
	return nil
}

func validatePodTemplate(tmpl *corev1.PodTemplateSpec, selector *metav1.LabelSelector, path *field.Path, restartPolicies ...corev1.RestartPolicy) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, metav1validation.ValidateLabels(tmpl.Labels, path.Child("metadata", "labels"))...)
	errs = append(errs, apimachineryvalidation.ValidateAnnotations(tmpl.Annotations, path.Child("metadata", "annotations"))...)
	if selector != nil {
		if sel, err := metav1.LabelSelectorAsSelector(selector); err == nil && !sel.Empty() && !sel.Matches(labels.Set(tmpl.Labels)) {
			errs = append(errs, field.Invalid(path.Child("metadata", "labels"), tmpl.Labels, "`selector` does not match template `labels`"))
		}
	}
	errs = append(errs, validatePodSpec(&tmpl.Spec, path.Child("spec"))...)
	if len(restartPolicies) > 0 {
		ok := false
		for _, rp := range restartPolicies {
			ok = ok || tmpl.Spec.RestartPolicy == rp
		}
		if !ok {
			allowed := make([]string, len(restartPolicies))
			for i, rp := range restartPolicies {
				allowed[i] = string(rp)
			}
			errs = append(errs, field.NotSupported(path.Child("spec", "restartPolicy"), tmpl.Spec.RestartPolicy, allowed))
		}
	}
	return errs
}

func validateSelector(selector *metav1.LabelSelector, path *field.Path) field.ErrorList {
	if selector == nil {
		return field.ErrorList{field.Required(path, "")}
	}
	errs := metav1validation.ValidateLabelSelector(selector, metav1validation.LabelSelectorValidationOptions{}, path)
	if len(selector.MatchLabels)+len(selector.MatchExpressions) == 0 {
		errs = append(errs, field.Invalid(path, selector, "empty selector is invalid for deployment"))
	}
	return errs
}

func validateDaemonSet(obj runtime.Object) field.ErrorList {
	ds := obj.(*appsv1.DaemonSet)
	p := field.NewPath("spec")
	errs := validateSelector(ds.Spec.Selector, p.Child("selector"))
	errs = append(errs, validatePodTemplate(&ds.Spec.Template, ds.Spec.Selector, p.Child("template"), corev1.RestartPolicyAlways)...)
	switch ds.Spec.UpdateStrategy.Type {
	case appsv1.RollingUpdateDaemonSetStrategyType, appsv1.OnDeleteDaemonSetStrategyType:
	default:
		errs = append(errs, field.NotSupported(p.Child("updateStrategy", "type"), ds.Spec.UpdateStrategy.Type, []string{"OnDelete", "RollingUpdate"}))
	}
	return errs
}

func validateDeployment(obj runtime.Object) field.ErrorList {
	d := obj.(*appsv1.Deployment)
	p := field.NewPath("spec")
	errs := validateSelector(d.Spec.Selector, p.Child("selector"))
	errs = append(errs, validatePodTemplate(&d.Spec.Template, d.Spec.Selector, p.Child("template"), corev1.RestartPolicyAlways)...)
	if d.Spec.Replicas != nil && *d.Spec.Replicas < 0 {
		errs = append(errs, field.Invalid(p.Child("replicas"), *d.Spec.Replicas, "must be greater than or equal to 0"))
	}
	return errs
}

func selectorImmutable(get func(runtime.Object) *metav1.LabelSelector) func(obj, old runtime.Object) field.ErrorList {
	return func(obj, old runtime.Object) field.ErrorList {
		return apimachineryvalidation.ValidateImmutableField(get(obj), get(old), field.NewPath("spec", "selector"))
	}
}

func validateJob(obj runtime.Object) field.ErrorList {
	j := obj.(*batchv1.Job)
	p := field.NewPath("spec")
	errs := validateSelector(j.Spec.Selector, p.Child("selector"))
	errs = append(errs, validatePodTemplate(&j.Spec.Template, j.Spec.Selector, p.Child("template"),
		corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever)...)
	return errs
}

func validateJobUpdate(obj, old runtime.Object) field.ErrorList {
	j, oldJob := obj.(*batchv1.Job), old.(*batchv1.Job)
	p := field.NewPath("spec")
	errs := apimachineryvalidation.ValidateImmutableField(j.Spec.Selector, oldJob.Spec.Selector, p.Child("selector"))
	return append(errs, apimachineryvalidation.ValidateImmutableField(j.Spec.Template, oldJob.Spec.Template, p.Child("template"))...)
}

// prepareJob plays upstream's job strategy: without a manual selector the server picks one.
func prepareJob(obj runtime.Object) {
	j := obj.(*batchv1.Job)
	if j.Spec.ManualSelector != nil && *j.Spec.ManualSelector {
		return
	}
	key := "batch.kubernetes.io/controller-uid"
	uid := string(j.UID)
	if j.Spec.Selector == nil {
		j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{key: uid}}
	}
	if j.Spec.Template.Labels == nil {
		j.Spec.Template.Labels = map[string]string{}
	}
	j.Spec.Template.Labels[key] = uid
	j.Spec.Template.Labels["batch.kubernetes.io/job-name"] = j.Name
	j.Spec.Template.Labels["controller-uid"] = uid
	j.Spec.Template.Labels["job-name"] = j.Name
}

func validateTaints(taints []corev1.Taint, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, t := range taints {
		p := path.Index(i)
		errs = append(errs, qualifiedNameErrors(t.Key, p.Child("key"))...)
		if t.Value != "" {
			for _, msg := range content.IsLabelValue(t.Value) {
				errs = append(errs, field.Invalid(p.Child("value"), t.Value, msg))
			}
		}
		if t.Effect == "" {
			errs = append(errs, field.Required(p.Child("effect"), ""))
		} else if !taintEffects.Has(string(t.Effect)) {
			errs = append(errs, field.NotSupported(p.Child("effect"), t.Effect, sets.List(taintEffects)))
		}
		id := t.Key + "\x00" + string(t.Effect)
		if seen.Has(id) {
			errs = append(errs, field.Duplicate(p, fmt.Sprintf("taint key=%q and effect=%q", t.Key, t.Effect)))
		}
		seen.Insert(id)
	}
	return errs
}

func validateNode(obj runtime.Object) field.ErrorList {
	node := obj.(*corev1.Node)
	errs := validateTaints(node.Spec.Taints, field.NewPath("spec", "taints"))
	return append(errs, validateNodeStatus(obj)...)
}

func validateNodeStatus(obj runtime.Object) field.ErrorList {
	node := obj.(*corev1.Node)
	p := field.NewPath("status")
	errs := validateResourceList(node.Status.Capacity, p.Child("capacity"))
	return append(errs, validateResourceList(node.Status.Allocatable, p.Child("allocatable"))...)
}

func validateService(obj runtime.Object) field.ErrorList {
	svc := obj.(*corev1.Service)
	p := field.NewPath("spec")
	var errs field.ErrorList
	switch svc.Spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
		if len(svc.Spec.Ports) == 0 && svc.Spec.ClusterIP != corev1.ClusterIPNone {
			errs = append(errs, field.Required(p.Child("ports"), ""))
		}
	case corev1.ServiceTypeExternalName:
		if svc.Spec.ExternalName == "" {
			errs = append(errs, field.Required(p.Child("externalName"), ""))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("type"), svc.Spec.Type, []string{"ClusterIP", "ExternalName", "LoadBalancer", "NodePort"}))
	}
	names := sets.New[string]()
	for i, port := range svc.Spec.Ports {
		pp := p.Child("ports").Index(i)
		if len(svc.Spec.Ports) > 1 || port.Name != "" {
			errs = append(errs, dnsLabelErrors(port.Name, pp.Child("name"))...)
		}
		if names.Has(port.Name) {
			errs = append(errs, field.Duplicate(pp.Child("name"), port.Name))
		}
		names.Insert(port.Name)
		if port.Port < 1 || port.Port > 65535 {
			errs = append(errs, field.Invalid(pp.Child("port"), port.Port, "must be between 1 and 65535, inclusive"))
		}
		if !protocols.Has(string(port.Protocol)) {
			errs = append(errs, field.NotSupported(pp.Child("protocol"), port.Protocol, sets.List(protocols)))
		}
	}
	return append(errs, metav1validation.ValidateLabels(svc.Spec.Selector, p.Child("selector"))...)
}

func validateServiceUpdate(obj, old runtime.Object) field.ErrorList {
	svc, oldSvc := obj.(*corev1.Service), old.(*corev1.Service)
	if oldSvc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != oldSvc.Spec.ClusterIP {
		return field.ErrorList{field.Invalid(field.NewPath("spec", "clusterIP"), svc.Spec.ClusterIP, "field is immutable")}
	}
	return nil
}

func validateDataKeys[T any](data map[string]T, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for key := range data {
		for _, msg := range utilvalidation.IsConfigMapKey(key) {
			errs = append(errs, field.Invalid(path.Key(key), key, msg))
		}
	}
	return errs
}

func validateConfigMap(obj runtime.Object) field.ErrorList {
	cm := obj.(*corev1.ConfigMap)
	errs := validateDataKeys(cm.Data, field.NewPath("data"))
	errs = append(errs, validateDataKeys(cm.BinaryData, field.NewPath("binaryData"))...)
	for key := range cm.Data {
		if _, dup := cm.BinaryData[key]; dup {
			errs = append(errs, field.Invalid(field.NewPath("data").Key(key), key, "duplicate of key present in binaryData"))
		}
	}
	return errs
}

func validateConfigMapUpdate(obj, old runtime.Object) field.ErrorList {
	cm, oldCM := obj.(*corev1.ConfigMap), old.(*corev1.ConfigMap)
	if oldCM.Immutable != nil && *oldCM.Immutable {
		if cm.Immutable == nil || !*cm.Immutable {
			return field.ErrorList{field.Forbidden(field.NewPath("immutable"), "field is immutable when `immutable` is set")}
		}
		if !apiequality.Semantic.DeepEqual(cm.Data, oldCM.Data) || !apiequality.Semantic.DeepEqual(cm.BinaryData, oldCM.BinaryData) {
			return field.ErrorList{field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set")}
		}
	}
	return nil
}

func validateSecret(obj runtime.Object) field.ErrorList {
	secret := obj.(*corev1.Secret)
	return append(validateDataKeys(secret.Data, field.NewPath("data")),
		validateDataKeys(secret.StringData, field.NewPath("stringData"))...)
}

// prepareSecret folds stringData into data, as upstream does on write.
func prepareSecret(obj runtime.Object) {
	secret := obj.(*corev1.Secret)
	if len(secret.StringData) > 0 {
		if secret.Data == nil {
			secret.Data = map[string][]byte{}
		}
		for k, v := range secret.StringData {
			secret.Data[k] = []byte(v)
		}
		secret.StringData = nil
	}
}

func validateSecretUpdate(obj, old runtime.Object) field.ErrorList {
	secret, oldSecret := obj.(*corev1.Secret), old.(*corev1.Secret)
	errs := apimachineryvalidation.ValidateImmutableField(secret.Type, oldSecret.Type, field.NewPath("type"))
	if oldSecret.Immutable != nil && *oldSecret.Immutable && !apiequality.Semantic.DeepEqual(secret.Data, oldSecret.Data) {
		errs = append(errs, field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set"))
	}
	return errs
}

func validateResourceQuota(obj runtime.Object) field.ErrorList {
	rq := obj.(*corev1.ResourceQuota)
	var errs field.ErrorList
	p := field.NewPath("spec", "hard")
	for name, q := range rq.Spec.Hard {
		kp := p.Key(string(name))
		errs = append(errs, qualifiedNameErrors(string(name), kp)...)
		if !strings.Contains(string(name), "/") && !standardQuotaResources.Has(string(name)) && !isHugePages(strings.TrimPrefix(string(name), "requests.")) {
			errs = append(errs, field.Invalid(kp, name, "must be a standard resource for quota"))
		}
		if strings.HasPrefix(string(name), "limits.") && strings.Contains(string(name), "/") {
			errs = append(errs, field.Invalid(kp, name, "must be a standard resource for quota; extended resources take the requests. prefix"))
		}
		errs = append(errs, validateQuantity(q, kp)...)
	}
	return errs
}

func validateLimitRange(obj runtime.Object) field.ErrorList {
	lr := obj.(*corev1.LimitRange)
	var errs field.ErrorList
	for i, item := range lr.Spec.Limits {
		p := field.NewPath("spec", "limits").Index(i)
		switch item.Type {
		case corev1.LimitTypePod, corev1.LimitTypeContainer, corev1.LimitTypePersistentVolumeClaim:
		default:
			errs = append(errs, field.NotSupported(p.Child("type"), item.Type, []string{"Container", "PersistentVolumeClaim", "Pod"}))
		}
		for _, list := range []struct {
			name string
			rl   corev1.ResourceList
		}{{"max", item.Max}, {"min", item.Min}, {"default", item.Default}, {"defaultRequest", item.DefaultRequest}} {
			for name, q := range list.rl {
				errs = append(errs, validateQuantity(q, p.Child(list.name).Key(string(name)))...)
			}
		}
	}
	return errs
}

func validateRuntimeClass(obj runtime.Object) field.ErrorList {
	rc := obj.(*nodev1.RuntimeClass)
	errs := dnsLabelErrors(rc.Handler, field.NewPath("handler"))
	if rc.Overhead != nil {
		errs = append(errs, validateResourceList(rc.Overhead.PodFixed, field.NewPath("overhead", "podFixed"))...)
	}
	if rc.Scheduling != nil {
		errs = append(errs, metav1validation.ValidateLabels(rc.Scheduling.NodeSelector, field.NewPath("scheduling", "nodeSelector"))...)
		errs = append(errs, validateTolerations(rc.Scheduling.Tolerations, field.NewPath("scheduling", "tolerations"))...)
	}
	return errs
}

func validateRuntimeClassUpdate(obj, old runtime.Object) field.ErrorList {
	return apimachineryvalidation.ValidateImmutableField(obj.(*nodev1.RuntimeClass).Handler,
		old.(*nodev1.RuntimeClass).Handler, field.NewPath("handler"))
}

func validateIntOrPercent(v *intstr.IntOrString, path *field.Path) field.ErrorList {
	if v == nil {
		return nil
	}
	if v.Type == intstr.Int {
		if v.IntVal < 0 {
			return field.ErrorList{field.Invalid(path, v.IntVal, "must be greater than or equal to 0")}
		}
		return nil
	}
	if msgs := utilvalidation.IsValidPercent(v.StrVal); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(path, v.StrVal, "must be an integer or percentage (e.g '5%')")}
	}
	return nil
}

func validatePDB(obj runtime.Object) field.ErrorList {
	pdb := obj.(*policyv1.PodDisruptionBudget)
	p := field.NewPath("spec")
	var errs field.ErrorList
	if pdb.Spec.MinAvailable != nil && pdb.Spec.MaxUnavailable != nil {
		errs = append(errs, field.Invalid(p, pdb.Spec, "minAvailable and maxUnavailable cannot be both set"))
	}
	errs = append(errs, validateIntOrPercent(pdb.Spec.MinAvailable, p.Child("minAvailable"))...)
	errs = append(errs, validateIntOrPercent(pdb.Spec.MaxUnavailable, p.Child("maxUnavailable"))...)
	if pdb.Spec.Selector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(pdb.Spec.Selector, metav1validation.LabelSelectorValidationOptions{}, p.Child("selector"))...)
	}
	return errs
}

func validatePolicyRules(rules []rbacv1.PolicyRule, namespaced bool, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, r := range rules {
		p := path.Index(i)
		if len(r.Verbs) == 0 {
			errs = append(errs, field.Required(p.Child("verbs"), "verbs must contain at least one value"))
		}
		if len(r.NonResourceURLs) > 0 {
			if namespaced {
				errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), r.NonResourceURLs, "namespaced rules cannot apply to non-resource URLs"))
			}
			if len(r.APIGroups) > 0 || len(r.Resources) > 0 || len(r.ResourceNames) > 0 {
				errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), r.NonResourceURLs, "rules cannot apply to both regular resources and non-resource URLs"))
			}
			continue
		}
		if len(r.APIGroups) == 0 {
			errs = append(errs, field.Required(p.Child("apiGroups"), "resource rules must supply at least one api group"))
		}
		if len(r.Resources) == 0 {
			errs = append(errs, field.Required(p.Child("resources"), "resource rules must supply at least one resource"))
		}
	}
	return errs
}

func validateRoleRef(ref rbacv1.RoleRef, clusterOnly bool, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if ref.APIGroup != rbacv1.GroupName {
		errs = append(errs, field.NotSupported(path.Child("apiGroup"), ref.APIGroup, []string{rbacv1.GroupName}))
	}
	kinds := []string{"ClusterRole", "Role"}
	if clusterOnly {
		kinds = []string{"ClusterRole"}
	}
	if !sets.New(kinds...).Has(ref.Kind) {
		errs = append(errs, field.NotSupported(path.Child("kind"), ref.Kind, kinds))
	}
	if ref.Name == "" {
		errs = append(errs, field.Required(path.Child("name"), ""))
	}
	return errs
}

func validateSubjects(subjects []rbacv1.Subject, requireSANamespace bool, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, s := range subjects {
		p := path.Index(i)
		if s.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		}
		switch s.Kind {
		case rbacv1.ServiceAccountKind:
			if s.APIGroup != "" {
				errs = append(errs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{""}))
			}
			if requireSANamespace && s.Namespace == "" {
				errs = append(errs, field.Required(p.Child("namespace"), ""))
			}
		case rbacv1.UserKind, rbacv1.GroupKind:
			if s.APIGroup != rbacv1.GroupName {
				errs = append(errs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{rbacv1.GroupName}))
			}
		default:
			errs = append(errs, field.NotSupported(p.Child("kind"), s.Kind, []string{"Group", "ServiceAccount", "User"}))
		}
	}
	return errs
}

func roleRefImmutable(get func(runtime.Object) rbacv1.RoleRef) func(obj, old runtime.Object) field.ErrorList {
	return func(obj, old runtime.Object) field.ErrorList {
		if get(obj) != get(old) {
			return field.ErrorList{field.Invalid(field.NewPath("roleRef"), get(obj), "cannot change roleRef")}
		}
		return nil
	}
}

func validatePriorityClass(obj runtime.Object) field.ErrorList {
	pc := obj.(*schedulingv1.PriorityClass)
	const highestUserDefinable = 1000000000
	if pc.Value > highestUserDefinable && !strings.HasPrefix(pc.Name, "system-") {
		return field.ErrorList{field.Forbidden(field.NewPath("value"),
			fmt.Sprintf("maximum allowed value of a user defined priority is %d", highestUserDefinable))}
	}
	return nil
}

func validatePriorityClassUpdate(obj, old runtime.Object) field.ErrorList {
	return apimachineryvalidation.ValidateImmutableField(obj.(*schedulingv1.PriorityClass).Value,
		old.(*schedulingv1.PriorityClass).Value, field.NewPath("value"))
}

// podQOSClass: Guaranteed when every container limits cpu and memory with requests equal to
// limits, BestEffort when nothing is requested or limited, Burstable otherwise.
func podQOSClass(spec *corev1.PodSpec) corev1.PodQOSClass {
	any, guaranteed := false, true
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[name]
			lim, hasLim := c.Resources.Limits[name]
			any = any || (hasReq && !req.IsZero()) || (hasLim && !lim.IsZero())
			if !hasLim || (hasReq && req.Cmp(lim) != 0) {
				guaranteed = false
			}
		}
	}
	switch {
	case !any:
		return corev1.PodQOSBestEffort
	case guaranteed:
		return corev1.PodQOSGuaranteed
	default:
		return corev1.PodQOSBurstable
	}
}
