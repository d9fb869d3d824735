package main

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// A subset of upstream's defaulting, applied when objects are decoded (as upstream does), so
// that what clients read back, and what server-side apply compares, looks like a real cluster's.

func addDefaultingFuncs(s *runtime.Scheme) {
	s.AddTypeDefaultingFunc(&corev1.Pod{}, func(o interface{}) {
		pod := o.(*corev1.Pod)
		defaultPodSpec(&pod.Spec)
	})
	s.AddTypeDefaultingFunc(&corev1.PodTemplate{}, func(o interface{}) {
		defaultPodSpec(&o.(*corev1.PodTemplate).Template.Spec)
	})
	s.AddTypeDefaultingFunc(&corev1.Namespace{}, func(o interface{}) {
		ns := o.(*corev1.Namespace)
		if ns.Name != "" {
			if ns.Labels == nil {
				ns.Labels = map[string]string{}
			}
			ns.Labels[corev1.LabelMetadataName] = ns.Name
		}
	})
	s.AddTypeDefaultingFunc(&corev1.Secret{}, func(o interface{}) {
		if secret := o.(*corev1.Secret); secret.Type == "" {
			secret.Type = corev1.SecretTypeOpaque
		}
	})
	s.AddTypeDefaultingFunc(&corev1.Service{}, func(o interface{}) { defaultService(o.(*corev1.Service)) })
	s.AddTypeDefaultingFunc(&appsv1.DaemonSet{}, func(o interface{}) {
		ds := o.(*appsv1.DaemonSet)
		u := &ds.Spec.UpdateStrategy
		if u.Type == "" {
			u.Type = appsv1.RollingUpdateDaemonSetStrategyType
		}
		if u.Type == appsv1.RollingUpdateDaemonSetStrategyType {
			if u.RollingUpdate == nil {
				u.RollingUpdate = &appsv1.RollingUpdateDaemonSet{}
			}
			if u.RollingUpdate.MaxUnavailable == nil {
				one := intstr.FromInt32(1)
				u.RollingUpdate.MaxUnavailable = &one
			}
			if u.RollingUpdate.MaxSurge == nil {
				zero := intstr.FromInt32(0)
				u.RollingUpdate.MaxSurge = &zero
			}
		}
		if ds.Spec.RevisionHistoryLimit == nil {
			ds.Spec.RevisionHistoryLimit = ptr(int32(10))
		}
		defaultPodSpec(&ds.Spec.Template.Spec)
	})
	s.AddTypeDefaultingFunc(&appsv1.Deployment{}, func(o interface{}) {
		d := o.(*appsv1.Deployment)
		if d.Spec.Replicas == nil {
			d.Spec.Replicas = ptr(int32(1))
		}
		st := &d.Spec.Strategy
		if st.Type == "" {
			st.Type = appsv1.RollingUpdateDeploymentStrategyType
		}
		if st.Type == appsv1.RollingUpdateDeploymentStrategyType {
			if st.RollingUpdate == nil {
				st.RollingUpdate = &appsv1.RollingUpdateDeployment{}
			}
			if st.RollingUpdate.MaxUnavailable == nil {
				v := intstr.FromString("25%")
				st.RollingUpdate.MaxUnavailable = &v
			}
			if st.RollingUpdate.MaxSurge == nil {
				v := intstr.FromString("25%")
				st.RollingUpdate.MaxSurge = &v
			}
		}
		if d.Spec.RevisionHistoryLimit == nil {
			d.Spec.RevisionHistoryLimit = ptr(int32(10))
		}
		if d.Spec.ProgressDeadlineSeconds == nil {
			d.Spec.ProgressDeadlineSeconds = ptr(int32(600))
		}
		defaultPodSpec(&d.Spec.Template.Spec)
	})
	s.AddTypeDefaultingFunc(&batchv1.Job{}, func(o interface{}) {
		j := o.(*batchv1.Job)
		if j.Spec.Completions == nil && j.Spec.Parallelism == nil {
			j.Spec.Completions = ptr(int32(1))
			j.Spec.Parallelism = ptr(int32(1))
		}
		if j.Spec.Parallelism == nil {
			j.Spec.Parallelism = ptr(int32(1))
		}
		if j.Spec.BackoffLimit == nil {
			j.Spec.BackoffLimit = ptr(int32(6))
		}
		if j.Spec.CompletionMode == nil {
			mode := batchv1.NonIndexedCompletion
			j.Spec.CompletionMode = &mode
		}
		if j.Spec.Suspend == nil {
			j.Spec.Suspend = ptr(false)
		}
		if j.Spec.ManualSelector == nil {
			j.Spec.ManualSelector = ptr(false)
		}
		defaultPodSpec(&j.Spec.Template.Spec)
	})
	s.AddTypeDefaultingFunc(&networkingv1.NetworkPolicy{}, func(o interface{}) {
		np := o.(*networkingv1.NetworkPolicy)
		if len(np.Spec.PolicyTypes) == 0 {
			np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
			if len(np.Spec.Egress) > 0 {
				np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
			}
		}
		for i := range np.Spec.Ingress {
			defaultNetworkPolicyPorts(np.Spec.Ingress[i].Ports)
		}
		for i := range np.Spec.Egress {
			defaultNetworkPolicyPorts(np.Spec.Egress[i].Ports)
		}
	})
	s.AddTypeDefaultingFunc(&rbacv1.RoleBinding{}, func(o interface{}) {
		defaultSubjects(o.(*rbacv1.RoleBinding).Subjects)
	})
	s.AddTypeDefaultingFunc(&rbacv1.ClusterRoleBinding{}, func(o interface{}) {
		defaultSubjects(o.(*rbacv1.ClusterRoleBinding).Subjects)
	})
	s.AddTypeDefaultingFunc(&schedulingv1.PriorityClass{}, func(o interface{}) {
		pc := o.(*schedulingv1.PriorityClass)
		if pc.PreemptionPolicy == nil {
			policy := corev1.PreemptLowerPriority
			pc.PreemptionPolicy = &policy
		}
	})
}

func ptr[T any](v T) *T { return &v }

func defaultPodSpec(spec *corev1.PodSpec) {
	if spec.DNSPolicy == "" {
		spec.DNSPolicy = corev1.DNSClusterFirst
	}
	if spec.RestartPolicy == "" {
		spec.RestartPolicy = corev1.RestartPolicyAlways
	}
	if spec.TerminationGracePeriodSeconds == nil {
		spec.TerminationGracePeriodSeconds = ptr(int64(corev1.DefaultTerminationGracePeriodSeconds))
	}
	if spec.SchedulerName == "" {
		spec.SchedulerName = corev1.DefaultSchedulerName
	}
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	for i := range spec.InitContainers {
		defaultContainer(&spec.InitContainers[i], spec.HostNetwork)
	}
	for i := range spec.Containers {
		defaultContainer(&spec.Containers[i], spec.HostNetwork)
	}
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		if v.HostPath != nil && v.HostPath.Type == nil {
			t := corev1.HostPathUnset
			v.HostPath.Type = &t
		}
		if v.ConfigMap != nil && v.ConfigMap.DefaultMode == nil {
			v.ConfigMap.DefaultMode = ptr(corev1.ConfigMapVolumeSourceDefaultMode)
		}
		if v.Secret != nil && v.Secret.DefaultMode == nil {
			v.Secret.DefaultMode = ptr(corev1.SecretVolumeSourceDefaultMode)
		}
	}
}

func defaultContainer(c *corev1.Container, hostNetwork bool) {
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = defaultPullPolicy(c.Image)
	}
	for i := range c.Ports {
		p := &c.Ports[i]
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if hostNetwork && p.HostPort == 0 {
			p.HostPort = p.ContainerPort
		}
	}
	for i := range c.Env {
		if ref := c.Env[i].ValueFrom; ref != nil && ref.FieldRef != nil && ref.FieldRef.APIVersion == "" {
			ref.FieldRef.APIVersion = "v1"
		}
	}
	// As upstream: a limit without a request makes the request equal to the limit.
	for name, limit := range c.Resources.Limits {
		if _, ok := c.Resources.Requests[name]; !ok {
			if c.Resources.Requests == nil {
				c.Resources.Requests = corev1.ResourceList{}
			}
			c.Resources.Requests[name] = limit.DeepCopy()
		}
	}
	for _, probe := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		if probe == nil {
			continue
		}
		if probe.TimeoutSeconds == 0 {
			probe.TimeoutSeconds = 1
		}
		if probe.PeriodSeconds == 0 {
			probe.PeriodSeconds = 10
		}
		if probe.SuccessThreshold == 0 {
			probe.SuccessThreshold = 1
		}
		if probe.FailureThreshold == 0 {
			probe.FailureThreshold = 3
		}
		if probe.HTTPGet != nil && probe.HTTPGet.Scheme == "" {
			probe.HTTPGet.Scheme = corev1.URISchemeHTTP
		}
	}
}

// defaultPullPolicy: Always for an untagged or :latest image, IfNotPresent otherwise.
func defaultPullPolicy(image string) corev1.PullPolicy {
	if strings.Contains(image, "@") {
		return corev1.PullIfNotPresent
	}
	name := image[strings.LastIndex(image, "/")+1:]
	tag := ""
	if i := strings.LastIndex(name, ":"); i >= 0 {
		tag = name[i+1:]
	}
	if tag == "" || tag == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

func defaultService(svc *corev1.Service) {
	if svc.Spec.Type == "" {
		svc.Spec.Type = corev1.ServiceTypeClusterIP
	}
	if svc.Spec.SessionAffinity == "" {
		svc.Spec.SessionAffinity = corev1.ServiceAffinityNone
	}
	if svc.Spec.Type != corev1.ServiceTypeExternalName && svc.Spec.InternalTrafficPolicy == nil {
		policy := corev1.ServiceInternalTrafficPolicyCluster
		svc.Spec.InternalTrafficPolicy = &policy
	}
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if p.TargetPort == intstr.FromInt32(0) || p.TargetPort == intstr.FromString("") {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
}

func defaultNetworkPolicyPorts(ports []networkingv1.NetworkPolicyPort) {
	for i := range ports {
		if ports[i].Protocol == nil {
			proto := corev1.ProtocolTCP
			ports[i].Protocol = &proto
		}
	}
}

func defaultSubjects(subjects []rbacv1.Subject) {
	for i := range subjects {
		s := &subjects[i]
		if s.APIGroup == "" && (s.Kind == rbacv1.UserKind || s.Kind == rbacv1.GroupKind) {
			s.APIGroup = rbacv1.GroupName
		}
	}
}
