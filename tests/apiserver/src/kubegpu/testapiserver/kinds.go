package main

import (
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// kinds is the exact set of resources this server serves (subresources are wired in server.go).
var kinds = []*kindInfo{
	// core, /api/v1
	{
		gv: corev1.SchemeGroupVersion, kind: "Namespace", resource: "namespaces", singular: "namespace",
		shortNames: []string{"ns"}, hasStatus: true, nameFn: apimachineryvalidation.ValidateNamespaceName,
		newObj: func() runtime.Object { return &corev1.Namespace{} }, newList: func() runtime.Object { return &corev1.NamespaceList{} },
		prepareCreate: func(obj runtime.Object) {
			ns := obj.(*corev1.Namespace)
			ns.Status = corev1.NamespaceStatus{Phase: corev1.NamespaceActive}
			if len(ns.Spec.Finalizers) == 0 {
				ns.Spec.Finalizers = []corev1.FinalizerName{corev1.FinalizerKubernetes}
			}
		},
		selectableFields: func(obj runtime.Object) fields.Set {
			return fields.Set{"status.phase": string(obj.(*corev1.Namespace).Status.Phase)}
		},
		fieldLabels: []string{"status.phase"},
	},
	{
		gv: corev1.SchemeGroupVersion, kind: "Node", resource: "nodes", singular: "node",
		shortNames: []string{"no"}, hasStatus: true, keepStatusOnCreate: true,
		newObj: func() runtime.Object { return &corev1.Node{} }, newList: func() runtime.Object { return &corev1.NodeList{} },
		validate:       validateNode,
		validateStatus: validateNodeStatus,
		selectableFields: func(obj runtime.Object) fields.Set {
			return fields.Set{"spec.unschedulable": strconv.FormatBool(obj.(*corev1.Node).Spec.Unschedulable)}
		},
		fieldLabels: []string{"spec.unschedulable"},
	},
	{
		gv: corev1.SchemeGroupVersion, kind: "Pod", resource: "pods", singular: "pod", namespaced: true,
		shortNames: []string{"po"}, hasStatus: true,
		newObj: func() runtime.Object { return &corev1.Pod{} }, newList: func() runtime.Object { return &corev1.PodList{} },
		prepareCreate: func(obj runtime.Object) {
			pod := obj.(*corev1.Pod)
			pod.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: podQOSClass(&pod.Spec)}
		},
		validate:       validatePod,
		validateUpdate: validatePodUpdate,
		selectableFields: func(obj runtime.Object) fields.Set {
			pod := obj.(*corev1.Pod)
			return fields.Set{
				"spec.nodeName":            pod.Spec.NodeName,
				"spec.restartPolicy":       string(pod.Spec.RestartPolicy),
				"spec.schedulerName":       pod.Spec.SchedulerName,
				"spec.serviceAccountName":  pod.Spec.ServiceAccountName,
				"spec.hostNetwork":         strconv.FormatBool(pod.Spec.HostNetwork),
				"status.phase":             string(pod.Status.Phase),
				"status.podIP":             pod.Status.PodIP,
				"status.nominatedNodeName": pod.Status.NominatedNodeName,
			}
		},
		fieldLabels: []string{"spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
			"spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP",
			"status.nominatedNodeName"},
	},
	{
		gv: corev1.SchemeGroupVersion, kind: "ConfigMap", resource: "configmaps", singular: "configmap", namespaced: true,
		shortNames: []string{"cm"},
		newObj:     func() runtime.Object { return &corev1.ConfigMap{} }, newList: func() runtime.Object { return &corev1.ConfigMapList{} },
		validate: validateConfigMap, validateUpdate: validateConfigMapUpdate,
	},
	{
		gv: corev1.SchemeGroupVersion, kind: "Secret", resource: "secrets", singular: "secret", namespaced: true,
		newObj: func() runtime.Object { return &corev1.Secret{} }, newList: func() runtime.Object { return &corev1.SecretList{} },
		prepareCreate: prepareSecret, validate: validateSecret, validateUpdate: validateSecretUpdate,
		selectableFields: func(obj runtime.Object) fields.Set {
			return fields.Set{"type": string(obj.(*corev1.Secret).Type)}
		},
		fieldLabels: []string{"type"},
	},
	{
		gv: corev1.SchemeGroupVersion, kind: "Service", resource: "services", singular: "service", namespaced: true,
		shortNames: []string{"svc"}, hasStatus: true, nameFn: apimachineryvalidation.NameIsDNS1035Label,
		newObj: func() runtime.Object { return &corev1.Service{} }, newList: func() runtime.Object { return &corev1.ServiceList{} },
		validate: validateService, validateUpdate: validateServiceUpdate,
		selectableFields: func(obj runtime.Object) fields.Set {
			svc := obj.(*corev1.Service)
			return fields.Set{"spec.clusterIP": svc.Spec.ClusterIP, "spec.type": string(svc.Spec.Type)}
		},
		fieldLabels: []string{"spec.clusterIP", "spec.type"},
	},
	{
		gv: corev1.SchemeGroupVersion, kind: "ServiceAccount", resource: "serviceaccounts", singular: "serviceaccount", namespaced: true,
		shortNames: []string{"sa"},
		newObj:     func() runtime.Object { return &corev1.ServiceAccount{} }, newList: func() runtime.Object { return &corev1.ServiceAccountList{} },
	},
	{
		gv: corev1.SchemeGroupVersion, kind: "Event", resource: "events", singular: "event", namespaced: true,
		shortNames: []string{"ev"},
		newObj:     func() runtime.Object { return &corev1.Event{} }, newList: func() runtime.Object { return &corev1.EventList{} },
		selectableFields: func(obj runtime.Object) fields.Set {
			ev := obj.(*corev1.Event)
			return fields.Set{
				"involvedObject.kind":            ev.InvolvedObject.Kind,
				"involvedObject.namespace":       ev.InvolvedObject.Namespace,
				"involvedObject.name":            ev.InvolvedObject.Name,
				"involvedObject.uid":             string(ev.InvolvedObject.UID),
				"involvedObject.apiVersion":      ev.InvolvedObject.APIVersion,
				"involvedObject.resourceVersion": ev.InvolvedObject.ResourceVersion,
				"involvedObject.fieldPath":       ev.InvolvedObject.FieldPath,
				"reason":                         ev.Reason,
				"reportingComponent":             ev.ReportingController,
				"source":                         ev.Source.Component,
				"type":                           ev.Type,
			}
		},
		fieldLabels: []string{"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
			"involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
			"involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"},
	},
	{
		gv: corev1.SchemeGroupVersion, kind: "ResourceQuota", resource: "resourcequotas", singular: "resourcequota", namespaced: true,
		shortNames: []string{"quota"}, hasStatus: true,
		newObj: func() runtime.Object { return &corev1.ResourceQuota{} }, newList: func() runtime.Object { return &corev1.ResourceQuotaList{} },
		validate: validateResourceQuota,
	},
	{
		gv: corev1.SchemeGroupVersion, kind: "LimitRange", resource: "limitranges", singular: "limitrange", namespaced: true,
		shortNames: []string{"limits"},
		newObj:     func() runtime.Object { return &corev1.LimitRange{} }, newList: func() runtime.Object { return &corev1.LimitRangeList{} },
		validate: validateLimitRange,
	},
	// apps/v1
	{
		gv: appsv1.SchemeGroupVersion, kind: "DaemonSet", resource: "daemonsets", singular: "daemonset", namespaced: true,
		shortNames: []string{"ds"}, hasStatus: true,
		newObj: func() runtime.Object { return &appsv1.DaemonSet{} }, newList: func() runtime.Object { return &appsv1.DaemonSetList{} },
		validate: validateDaemonSet,
		validateUpdate: selectorImmutable(func(o runtime.Object) *metav1.LabelSelector {
			return o.(*appsv1.DaemonSet).Spec.Selector
		}),
	},
	{
		gv: appsv1.SchemeGroupVersion, kind: "Deployment", resource: "deployments", singular: "deployment", namespaced: true,
		shortNames: []string{"deploy"}, hasStatus: true,
		newObj: func() runtime.Object { return &appsv1.Deployment{} }, newList: func() runtime.Object { return &appsv1.DeploymentList{} },
		validate: validateDeployment,
		validateUpdate: selectorImmutable(func(o runtime.Object) *metav1.LabelSelector {
			return o.(*appsv1.Deployment).Spec.Selector
		}),
	},
	// batch/v1
	{
		gv: batchv1.SchemeGroupVersion, kind: "Job", resource: "jobs", singular: "job", namespaced: true,
		hasStatus: true,
		newObj:    func() runtime.Object { return &batchv1.Job{} }, newList: func() runtime.Object { return &batchv1.JobList{} },
		prepareCreate: prepareJob, validate: validateJob, validateUpdate: validateJobUpdate,
		selectableFields: func(obj runtime.Object) fields.Set {
			return fields.Set{"status.successful": strconv.Itoa(int(obj.(*batchv1.Job).Status.Succeeded))}
		},
		fieldLabels: []string{"status.successful"},
	},
	// coordination.k8s.io/v1
	{
		gv: coordinationv1.SchemeGroupVersion, kind: "Lease", resource: "leases", singular: "lease", namespaced: true,
		newObj: func() runtime.Object { return &coordinationv1.Lease{} }, newList: func() runtime.Object { return &coordinationv1.LeaseList{} },
	},
	// networking.k8s.io/v1
	{
		gv: networkingv1.SchemeGroupVersion, kind: "NetworkPolicy", resource: "networkpolicies", singular: "networkpolicy", namespaced: true,
		shortNames: []string{"netpol"},
		newObj:     func() runtime.Object { return &networkingv1.NetworkPolicy{} }, newList: func() runtime.Object { return &networkingv1.NetworkPolicyList{} },
		validate: func(obj runtime.Object) field.ErrorList {
			np := obj.(*networkingv1.NetworkPolicy)
			return metav1validation.ValidateLabelSelector(&np.Spec.PodSelector, metav1validation.LabelSelectorValidationOptions{}, field.NewPath("spec", "podSelector"))
		},
	},
	// node.k8s.io/v1
	{
		gv: nodev1.SchemeGroupVersion, kind: "RuntimeClass", resource: "runtimeclasses", singular: "runtimeclass",
		newObj: func() runtime.Object { return &nodev1.RuntimeClass{} }, newList: func() runtime.Object { return &nodev1.RuntimeClassList{} },
		validate: validateRuntimeClass, validateUpdate: validateRuntimeClassUpdate,
	},
	// policy/v1
	{
		gv: policyv1.SchemeGroupVersion, kind: "PodDisruptionBudget", resource: "poddisruptionbudgets", singular: "poddisruptionbudget", namespaced: true,
		shortNames: []string{"pdb"}, hasStatus: true,
		newObj: func() runtime.Object { return &policyv1.PodDisruptionBudget{} }, newList: func() runtime.Object { return &policyv1.PodDisruptionBudgetList{} },
		validate: validatePDB,
	},
	// rbac.authorization.k8s.io/v1
	{
		gv: rbacv1.SchemeGroupVersion, kind: "Role", nameFn: path.ValidatePathSegmentName, resource: "roles", singular: "role", namespaced: true,
		newObj: func() runtime.Object { return &rbacv1.Role{} }, newList: func() runtime.Object { return &rbacv1.RoleList{} },
		validate: func(obj runtime.Object) field.ErrorList {
			return validatePolicyRules(obj.(*rbacv1.Role).Rules, true, field.NewPath("rules"))
		},
	},
	{
		gv: rbacv1.SchemeGroupVersion, kind: "RoleBinding", nameFn: path.ValidatePathSegmentName, resource: "rolebindings", singular: "rolebinding", namespaced: true,
		newObj: func() runtime.Object { return &rbacv1.RoleBinding{} }, newList: func() runtime.Object { return &rbacv1.RoleBindingList{} },
		validate: func(obj runtime.Object) field.ErrorList {
			rb := obj.(*rbacv1.RoleBinding)
			return append(validateRoleRef(rb.RoleRef, false, field.NewPath("roleRef")),
				validateSubjects(rb.Subjects, false, field.NewPath("subjects"))...)
		},
		validateUpdate: roleRefImmutable(func(o runtime.Object) rbacv1.RoleRef { return o.(*rbacv1.RoleBinding).RoleRef }),
	},
	{
		gv: rbacv1.SchemeGroupVersion, kind: "ClusterRole", nameFn: path.ValidatePathSegmentName, resource: "clusterroles", singular: "clusterrole",
		newObj: func() runtime.Object { return &rbacv1.ClusterRole{} }, newList: func() runtime.Object { return &rbacv1.ClusterRoleList{} },
		validate: func(obj runtime.Object) field.ErrorList {
			return validatePolicyRules(obj.(*rbacv1.ClusterRole).Rules, false, field.NewPath("rules"))
		},
	},
	{
		gv: rbacv1.SchemeGroupVersion, kind: "ClusterRoleBinding", nameFn: path.ValidatePathSegmentName, resource: "clusterrolebindings", singular: "clusterrolebinding",
		newObj: func() runtime.Object { return &rbacv1.ClusterRoleBinding{} }, newList: func() runtime.Object { return &rbacv1.ClusterRoleBindingList{} },
		validate: func(obj runtime.Object) field.ErrorList {
			crb := obj.(*rbacv1.ClusterRoleBinding)
			return append(validateRoleRef(crb.RoleRef, true, field.NewPath("roleRef")),
				validateSubjects(crb.Subjects, true, field.NewPath("subjects"))...)
		},
		validateUpdate: roleRefImmutable(func(o runtime.Object) rbacv1.RoleRef { return o.(*rbacv1.ClusterRoleBinding).RoleRef }),
	},
	// scheduling.k8s.io/v1
	{
		gv: schedulingv1.SchemeGroupVersion, kind: "PriorityClass", resource: "priorityclasses", singular: "priorityclass",
		shortNames: []string{"pc"},
		newObj:     func() runtime.Object { return &schedulingv1.PriorityClass{} }, newList: func() runtime.Object { return &schedulingv1.PriorityClassList{} },
		validate: validatePriorityClass, validateUpdate: validatePriorityClassUpdate,
	},
}

// addFieldLabelConversions accepts, per kind, the field selector labels its attrFunc fills.
func addFieldLabelConversions(s *runtime.Scheme) {
	for _, k := range kinds {
		allowed := map[string]bool{"metadata.name": true}
		if k.namespaced {
			allowed["metadata.namespace"] = true
		}
		for _, label := range k.fieldLabels {
			allowed[label] = true
		}
		if err := s.AddFieldLabelConversionFunc(k.gv.WithKind(k.kind), func(label, value string) (string, string, error) {
			if allowed[label] {
				return label, value, nil
			}
			return "", "", fmt.Errorf("field label not supported: %s", label)
		}); err != nil {
			panic(err)
		}
	}
}
