# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Kubelet settings that are checked against the kubelet they go to, and merged into its files.

Pure functions over data and text: they run on the target's Python (3.8+), import only the
standard library, and are tested without a host.

Validators (each returns a list of messages, one per problem; empty means valid):
- validate_feature_gates(gates, kubernetes_version, unchecked=()): gates against the release table
- validate_node_labels(labels): key and value syntax, and what a kubelet may set on its own node
- validate_taints(taints): key, value and effect syntax, duplicates
- validate_settings(settings): KubeletConfiguration field names and reserved keys

Helpers:
- parse_kubernetes_version(text): (1, 31) from "1.31", "v1.31.2", "Kubernetes v1.31.2",
  "k3s version v1.31.2+k3s1 (...)"
- sanitize_label_value(text): a product name made into a label value the way GPU Feature
  Discovery does it ("Tesla K80" -> "Tesla-K80"), then trimmed to the label value rules
- split_node_labels(labels): (labels a kubelet may set on itself, labels only the API may set)
- merge_kubelet_config / build_dropin_config: KubeletConfiguration data
- merge_extra_args_file(text, ...): the KUBELET_EXTRA_ARGS line of /etc/default/kubelet
- merge_rancher_config(data, ...): node-label, node-taint and kubelet-arg of a k3s/RKE2 config
"""

from __future__ import absolute_import, division, print_function

import copy
import difflib
import re

__metaclass__ = type

# ---------------------------------------------------------------------------------------------
# Feature gates by Kubernetes release
# ---------------------------------------------------------------------------------------------
#
# Facts recorded from these sources (lifecycle data only, re-encoded; nothing copied):
#
#   S36  kubernetes test/compatibility_lifecycle/reference/versioned_feature_list.yaml, a 1.36
#        development snapshot (aks-lts/kubernetes@0d5bdaed): every gate still registered early in
#        the 1.36 cycle, with its full versioned history. The bulk of the table.
#   S34  the same file at the 1.34 release (redhat-chai-bot/kubernetes@377abc1c).
#   D34  the same file early in the 1.34 cycle (kubernetes/kubernetes@002acc1a).
#   D33  the same file in the 1.33 cycle (kubernetes/kubernetes@fbba6b47).
#   S32  kubernetes pkg/features/versioned_kube_features.go in the 1.32 cycle
#        (kubernetes/kubernetes@0021731d).
#   S31  kubernetes pkg/features/kube_features.go in the 1.31 cycle.
#   S28  kubernetes pkg/features/kube_features.go at 1.28 (the last unversioned table).
#   W    kubernetes/website content/en/docs/reference/command-line-tools-reference/
#        feature-gates/<Gate>.md front matter (stages, fromVersion/toVersion, removed).
#   PR   the kubernetes/kubernetes pull request that removed the gate (number given inline).
#
# Encoding: "<version> <stage><default><lock>" tokens, oldest first. Stage A=alpha, B=beta,
# G=GA, D=deprecated; default + (on) or - (off); "!" = locked to its default (the kubelet refuses
# to start when the gate is set to the other value). The state at a release is the last token at
# or below it; a release below the first token does not have the gate. The synthetic "1.0"
# entries that the versioned lists carry for emulation are left out: such gates appeared with
# their first real entry.
#
# Removal: None (still present in 1.35), "1.33" (first release without the gate, pinned by W or a
# PR), or "1.32..1.33" when the sources only bound it: present in a snapshot of the cycle before
# the first number, absent from a snapshot of the second. Inside such a window kubegpu gives the
# gate the benefit of the doubt; from the second number on it reports the gate as removed.
#
# Not covered: client-go gates (WatchListClient, InformerResourceVersion, ...) that kube binaries
# also accept; list those in `unchecked` (module option unchecked_feature_gates).

SUPPORTED_RELEASES = ((1, 29), (1, 35))

_STAGE_NAMES = {"A": "alpha", "B": "beta", "G": "GA", "D": "deprecated"}

# Present in S36 (so in every release from their first token through 1.35). Exceptions noted.
_GATES_PRESENT = {
    "AggregatedDiscoveryRemoveBetaType": "1.33 D+, 1.35 D+!",
    "AllowDNSOnlyNodeCSR": "1.31 D-",
    "AllowInsecureKubeletCertificateSigningRequests": "1.31 D-",
    "AllowOverwriteTerminationGracePeriodSeconds": "1.32 D-, 1.35 D-!",
    "AllowParsingUserUIDFromCertAuth": "1.33 B+",
    "AllowUnsafeMalformedObjectDeletion": "1.32 A-",
    "AnonymousAuthConfigurableEndpoints": "1.31 A-, 1.32 B+, 1.34 G+!",
    "AnyVolumeDataSource": "1.18 A-, 1.24 B+, 1.33 G+!",
    "APIResponseCompression": "1.8 A-, 1.16 B+",
    "APIServerIdentity": "1.20 A-, 1.26 B+",
    "APIServerTracing": "1.22 A-, 1.27 B+, 1.34 G+!",
    "APIServingWithRoutine": "1.30 A-",
    "AuthorizeNodeWithSelectors": "1.31 A-, 1.32 B+, 1.34 G+!",
    "AuthorizePodWebsocketUpgradeCreatePermission": "1.35 B+",
    "AuthorizeWithSelectors": "1.31 A-, 1.32 B+, 1.34 G+!",
    "BtreeWatchCache": "1.32 B+, 1.33 G+!",
    "CBORServingAndStorage": "1.32 A-",
    "ChangeContainerStatusOnKubeletRestart": "1.35 D-",
    "ClearingNominatedNodeNameAfterBinding": "1.34 A-, 1.35 B+",
    "CloudControllerManagerWatchBasedRoutesReconciliation": "1.35 A-",
    "CloudControllerManagerWebhook": "1.27 A-",
    "ClusterTrustBundle": "1.27 A-, 1.33 B-",
    "ClusterTrustBundleProjection": "1.29 A-, 1.33 B-",
    "ComponentFlagz": "1.32 A-",
    "ComponentStatusz": "1.32 A-",
    "ConcurrentWatchObjectDecode": "1.31 B-",
    "ConsistentListFromCache": "1.28 A-, 1.31 B+, 1.34 G+!",
    "ConstrainedImpersonation": "1.35 A-",
    "ContainerCheckpoint": "1.25 A-, 1.30 B+",
    "ContainerRestartRules": "1.34 A-, 1.35 B+",
    "ContainerStopSignals": "1.33 A-",
    "ContextualLogging": "1.24 A-, 1.30 B+",
    "CoordinatedLeaderElection": "1.31 A-, 1.33 B-",
    "CPUManagerPolicyAlphaOptions": "1.23 A-",
    "CPUManagerPolicyBetaOptions": "1.23 B+",
    "CPUManagerPolicyOptions": "1.22 A-, 1.23 B+, 1.33 G+!",
    "CRDObservedGenerationTracking": "1.35 B-",
    "CRDValidationRatcheting": "1.28 A-, 1.30 B+, 1.33 G+!",
    "CrossNamespaceVolumeDataSource": "1.26 A-",
    "CSIServiceAccountTokenSecrets": "1.35 B+",
    "CSIVolumeHealth": "1.21 A-",
    # The gate string is CustomCPUCFSQuotaPeriod through 1.35 (S34, W; S36 lists it under the Go
    # constant's name CPUCFSQuotaPeriod, and W has it GA only from 1.36).
    "CustomCPUCFSQuotaPeriod": "1.12 A-",
    "CustomResourceFieldSelectors": "1.30 A-, 1.31 B+, 1.32 G+!",
    "DeclarativeValidation": "1.33 B+",
    "DeclarativeValidationTakeover": "1.33 B-",
    "DeploymentReplicaSetTerminatingReplicas": "1.33 A-, 1.35 B+",
    "DetectCacheInconsistency": "1.34 B+",
    "DisableAllocatorDualWrite": "1.31 A-, 1.33 B-, 1.34 G+, 1.35 G+!",
    "DisableCPUQuotaWithExclusiveCPUs": "1.33 B+",
    "DisableNodeKubeProxyVersion": "1.29 A-, 1.31 D-, 1.33 D+",
    "DRAAdminAccess": "1.32 A-, 1.34 B+",
    "DRAConsumableCapacity": "1.34 A-",
    "DRADeviceBindingConditions": "1.34 A-",
    "DRADeviceTaintRules": "1.35 A-",
    "DRADeviceTaints": "1.33 A-",
    "DRAExtendedResource": "1.34 A-",
    "DRAPartitionableDevices": "1.33 A-",
    "DRAPrioritizedList": "1.33 A-, 1.34 B+",
    "DRAResourceClaimDeviceStatus": "1.32 A-, 1.33 B+",
    "DRASchedulerFilterTimeout": "1.34 B+",
    "DynamicResourceAllocation": "1.26 A-, 1.32 B-, 1.34 G+, 1.35 G+!",
    "EnvFiles": "1.34 A-, 1.35 B+",
    "EventedPLEG": "1.26 A-",
    "ExecProbeTimeout": "1.20 G+, 1.35 G+!",
    "ExternalServiceAccountTokenSigner": "1.32 A-, 1.34 B+",
    "GangScheduling": "1.35 A-",
    "GenericWorkload": "1.35 A-",
    "GitRepoVolumeDriver": "1.33 D-",
    "GracefulNodeShutdown": "1.20 A-, 1.21 B+",
    "GracefulNodeShutdownBasedOnPodPriority": "1.23 A-, 1.24 B+",
    "HostnameOverride": "1.34 A-, 1.35 B+",
    "HPAConfigurableTolerance": "1.33 A-, 1.35 B+",
    "HPAScaleToZero": "1.16 A-",
    "ImageMaximumGCAge": "1.29 A-, 1.30 B+, 1.35 G+!",
    "ImageVolume": "1.31 A-, 1.33 B-, 1.35 B+",
    "ImageVolumeWithDigest": "1.35 A-",
    "InPlacePodLevelResourcesVerticalScaling": "1.35 A-",
    "InPlacePodVerticalScaling": "1.27 A-, 1.33 B+, 1.35 G+!",
    "InPlacePodVerticalScalingAllocatedStatus": "1.32 A-, 1.33 D-",
    "InPlacePodVerticalScalingExclusiveCPUs": "1.32 A-",
    "InPlacePodVerticalScalingExclusiveMemory": "1.34 A-",
    "JobBackoffLimitPerIndex": "1.28 A-, 1.29 B+, 1.33 G+!",
    "JobManagedBy": "1.30 A-, 1.32 B+, 1.35 G+!",
    "JobPodReplacementPolicy": "1.28 A-, 1.29 B+, 1.34 G+!",
    "JobSuccessPolicy": "1.30 A-, 1.31 B+, 1.33 G+!",
    "KMSv1": "1.28 D+, 1.29 D-",
    "KubeletCgroupDriverFromCRI": "1.28 A-, 1.31 B+, 1.34 G+!",
    "KubeletCrashLoopBackOffMax": "1.32 A-, 1.35 B+",
    "KubeletEnsureSecretPulledImages": "1.33 A-, 1.35 B+",
    "KubeletFineGrainedAuthz": "1.32 A-, 1.33 B+",
    "KubeletInUserNamespace": "1.22 A-",
    "KubeletPodResourcesDynamicResources": "1.27 A-, 1.34 B+",
    "KubeletPodResourcesGet": "1.27 A-, 1.34 B+",
    "KubeletPodResourcesListUseActivePods": "1.34 D+",
    "KubeletPSI": "1.33 A-, 1.34 B+",
    "KubeletRegistrationGetOnExistsOnly": "1.32 D-",
    "KubeletSeparateDiskGC": "1.29 A-, 1.31 B+",
    "KubeletServiceAccountTokenForCredentialProviders": "1.33 A-, 1.34 B+",
    "KubeletTracing": "1.25 A-, 1.27 B+, 1.34 G+!",
    "ListFromCacheSnapshot": "1.33 A-, 1.34 B+",
    "LocalStorageCapacityIsolationFSQuotaMonitoring": "1.15 A-, 1.31 B-",
    "LogarithmicScaleDown": "1.21 A-, 1.22 B+, 1.31 G+!",
    "LoggingAlphaOptions": "1.24 A-",
    "LoggingBetaOptions": "1.24 B+",
    "MatchLabelKeysInPodAffinity": "1.29 A-, 1.31 B+, 1.33 G+!",
    "MatchLabelKeysInPodTopologySpread": "1.25 A-, 1.27 B+",
    "MatchLabelKeysInPodTopologySpreadSelectorMerge": "1.34 B+",
    "MaxUnavailableStatefulSet": "1.24 A-, 1.35 B+",
    "MemoryQoS": "1.22 A-",
    "MultiCIDRServiceAllocator": "1.27 A-, 1.31 B-, 1.33 G+, 1.34 G+!",
    "MutableCSINodeAllocatableCount": "1.33 A-, 1.34 B-, 1.35 B+",
    "MutablePodResourcesForSuspendedJobs": "1.35 A-",
    "MutablePVNodeAffinity": "1.35 A-",
    "MutableSchedulingDirectivesForSuspendedJobs": "1.35 A-",
    # S32 (code of the 1.32 cycle) has it alpha from 1.30; S36 starts it at 1.32.
    "MutatingAdmissionPolicy": "1.30 A-, 1.34 B-",
    "NFTablesProxyMode": "1.29 A-, 1.31 B+, 1.33 G+!",
    "NodeDeclaredFeatures": "1.35 A-",
    "NodeInclusionPolicyInPodTopologySpread": "1.25 A-, 1.26 B+, 1.33 G+!",
    "NodeLogQuery": "1.27 A-, 1.30 B-",
    "NodeSwap": "1.22 A-, 1.28 B-, 1.30 B+, 1.34 G+!",
    "NominatedNodeNameForExpectation": "1.34 A-, 1.35 B+",
    "OpenAPIEnums": "1.23 A-, 1.24 B+",
    "OpportunisticBatching": "1.35 B+",
    "OrderedNamespaceDeletion": "1.30 B-, 1.33 B+, 1.34 G+!",
    "PodAndContainerStatsFromCRI": "1.23 A-",
    "PodCertificateRequest": "1.34 A-, 1.35 B-",
    "PodDeletionCost": "1.21 A-, 1.22 B+",
    "PodLevelResources": "1.32 A-, 1.34 B+",
    "PodLifecycleSleepAction": "1.29 A-, 1.30 B+, 1.34 G+!",
    "PodLifecycleSleepActionAllowZero": "1.32 A-, 1.33 B+, 1.34 G+!",
    "PodLogsQuerySplitStreams": "1.32 A-",
    "PodObservedGenerationTracking": "1.33 A-, 1.34 B+, 1.35 G+!",
    "PodReadyToStartContainersCondition": "1.28 A-, 1.29 B+",
    "PodSchedulingReadiness": "1.26 A-, 1.27 B+, 1.30 G+!",
    "PodTopologyLabelsAdmission": "1.33 A-, 1.35 B+",
    "PortForwardWebsockets": "1.30 A-, 1.31 B+",
    "PreferSameTrafficDistribution": "1.33 A-, 1.34 B+, 1.35 G+!",
    "PreventStaticPodAPIReferences": "1.34 B+",
    "ProcMountType": "1.12 A-, 1.31 B-, 1.33 B+",
    "QOSReserved": "1.11 A-",
    "RecoverVolumeExpansionFailure": "1.23 A-, 1.32 B+, 1.34 G+!",
    "RecursiveReadOnlyMounts": "1.30 A-, 1.31 B+, 1.33 G+!",
    "ReduceDefaultCrashLoopBackOffDecay": "1.33 A-",
    "RelaxedDNSSearchValidation": "1.32 A-, 1.33 B+, 1.34 G+!",
    "RelaxedEnvironmentVariableValidation": "1.30 A-, 1.32 B+, 1.34 G+!",
    "RelaxedServiceNameValidation": "1.34 A-",
    "ReloadKubeletServerCertificateFile": "1.31 B+",
    "RemoteRequestHeaderUID": "1.32 A-, 1.33 B+",
    "ResilientWatchCacheInitialization": "1.31 B+, 1.34 G+!",
    "ResourceHealthStatus": "1.31 A-",
    "RestartAllContainersOnContainerExits": "1.35 A-",
    "RetryGenerateName": "1.30 A-, 1.31 B+, 1.32 G+!",
    "RotateKubeletServerCertificate": "1.7 A-, 1.12 B+",
    # The gate string (S32 source, S34, W); S36 lists it as RuntimeClassInImageCriAPI.
    "RuntimeClassInImageCriApi": "1.29 A-",
    "SchedulerAsyncAPICalls": "1.34 B-",
    "SchedulerAsyncPreemption": "1.32 A-, 1.33 B+",
    "SchedulerPopFromBackoffQ": "1.33 B+",
    "SchedulerQueueingHints": "1.28 B-, 1.32 B+, 1.34 G+!",
    "SELinuxChangePolicy": "1.32 A-, 1.33 B+",
    "SELinuxMount": "1.30 A-, 1.33 B-",
    "SELinuxMountReadWriteOncePod": "1.25 A-, 1.27 B-, 1.28 B+",
    "SeparateCacheWatchRPC": "1.28 B+, 1.33 D-",
    "SeparateTaintEvictionController": "1.29 B+, 1.34 G+!",
    "ServiceAccountNodeAudienceRestriction": "1.32 B-, 1.33 B+",
    "ServiceAccountTokenJTI": "1.29 A-, 1.30 B+, 1.32 G+!",
    "ServiceAccountTokenNodeBinding": "1.29 A-, 1.31 B+, 1.33 G+!",
    "ServiceAccountTokenNodeBindingValidation": "1.29 A-, 1.30 B+, 1.32 G+!",
    "ServiceAccountTokenPodNodeInfo": "1.29 A-, 1.30 B+, 1.32 G+!",
    "SidecarContainers": "1.28 A-, 1.29 B+, 1.33 G+!",
    "SizeBasedListCostEstimate": "1.34 B+",
    # Only in lists from the 1.34 release on (S34 has it, D34 does not).
    "StatefulSetSemanticRevisionComparison": "1.34 B+",
    "StorageCapacityScoring": "1.33 A-",
    "StorageNamespaceIndex": "1.30 B+, 1.33 D+",
    "StorageVersionAPI": "1.20 A-",
    "StorageVersionHash": "1.14 A-, 1.15 B+",
    "StorageVersionMigrator": "1.30 A-, 1.35 B-",
    "StreamingCollectionEncodingToJSON": "1.33 B+, 1.34 G+!",
    "StreamingCollectionEncodingToProtobuf": "1.33 B+, 1.34 G+!",
    "StrictIPCIDRValidation": "1.33 A-",
    "StructuredAuthenticationConfiguration": "1.29 A-, 1.30 B+, 1.34 G+!",
    "StructuredAuthenticationConfigurationEgressSelector": "1.34 B+",
    "StructuredAuthenticationConfigurationJWKSMetrics": "1.35 B+",
    "SupplementalGroupsPolicy": "1.31 A-, 1.33 B+, 1.35 G+!",
    "SystemdWatchdog": "1.32 B+, 1.35 G+!",
    "TaintTolerationComparisonOperators": "1.35 A-",
    "TokenRequestServiceAccountUIDValidation": "1.34 B+",
    "TopologyManagerPolicyAlphaOptions": "1.26 A-",
    "TopologyManagerPolicyBetaOptions": "1.26 B-, 1.28 B+",
    # S34 (the 1.34 release's own list) has the 1.32 GA entry unlocked; S36 marks it locked.
    "TopologyManagerPolicyOptions": "1.26 A-, 1.28 B+, 1.32 G+",
    "TranslateStreamCloseWebsocketRequests": "1.29 A-, 1.30 B+",
    "UnauthenticatedHTTP2DOSMitigation": "1.25 B-, 1.29 B+",
    "UnknownVersionInteroperabilityProxy": "1.28 A-",
    "UserNamespacesHostNetworkSupport": "1.35 A-",
    "UserNamespacesSupport": "1.25 A-, 1.30 B-, 1.33 B+",
    "VolumeAttributesClass": "1.29 A-, 1.31 B-, 1.34 G+",
    "VolumeLimitScaling": "1.35 A-",
    "WatchCacheInitializationPostStartHook": "1.31 B-",
    "WatchList": "1.27 A-, 1.32 B+, 1.33 B-, 1.34 B+",
    "WindowsCPUAndMemoryAffinity": "1.32 A-",
    "WindowsGracefulNodeShutdown": "1.32 A-, 1.34 B+",
    "WindowsHostNetwork": "1.26 A-, 1.33 D-",
    "WinDSR": "1.14 A-, 1.33 B+, 1.34 G+!",
    "WinOverlay": "1.14 A-, 1.20 B+, 1.34 G+!",
    # component-base meta-gates, registered in every release kubegpu supports.
    "AllAlpha": "1.0 A-",
    "AllBeta": "1.0 B-",
}

# Removed gates: (tokens, removal). Tokens from the newest source that still lists the gate.
_GATES_REMOVED = {
    # In S34, gone from S36: removed in 1.35 or early in the 1.36 cycle.
    "AllowServiceLBStatusOnNonLB": ("1.29 D-, 1.32 D-!", "1.35..1.36"),
    "ComponentSLIs": ("1.26 A-, 1.27 B+, 1.32 G+!", "1.35..1.36"),
    "CronJobsScheduledAnnotation": ("1.28 B+, 1.32 G+!", "1.35..1.36"),
    "CSIMigrationPortworx": ("1.23 A-, 1.25 B-, 1.31 B+, 1.33 G+!", "1.35..1.36"),
    "HonorPVReclaimPolicy": ("1.23 A-, 1.31 B+, 1.33 G+!", "1.35..1.36"),
    "InTreePluginPortworxUnregister": ("1.23 A-", "1.35..1.36"),
    "LoadBalancerIPMode": ("1.29 A-, 1.30 B+, 1.32 G+!", "1.35..1.36"),
    "MemoryManager": ("1.21 A-, 1.22 B+, 1.32 G+!", "1.36"),  # PR 136381 (1.36 cycle)
    "PodIndexLabel": ("1.28 B+, 1.32 G+!", "1.35..1.36"),
    "ProbeHostPodSecurityStandards": ("1.34 G+!", "1.35..1.36"),
    "ServiceTrafficDistribution": ("1.30 A-, 1.31 B+, 1.33 G+!", "1.35..1.36"),
    "SizeMemoryBackedVolumes": ("1.20 A-, 1.22 B+, 1.32 G+!", "1.35"),  # PR 133720
    "StatefulSetAutoDeletePVC": ("1.23 A-, 1.27 B+, 1.32 G+!", "1.35..1.36"),
    "StrictCostEnforcementForVAP": ("1.30 B-, 1.32 G+!", "1.35..1.36"),
    "StrictCostEnforcementForWebhooks": ("1.30 B-, 1.32 G+!", "1.35..1.36"),
    "StructuredAuthorizationConfiguration": ("1.29 A-, 1.30 B+, 1.32 G+!", "1.35..1.36"),
    "TopologyAwareHints": ("1.21 A-, 1.23 B-, 1.24 B+, 1.33 G+!", "1.35..1.36"),
    "UserNamespacesPodSecurityStandards": ("1.29 A-", "1.35..1.36"),
    "WatchFromStorageWithoutResourceVersion": ("1.27 B-, 1.33 D-!", "1.35..1.36"),
    # Removed in 1.33 and 1.34.
    "AppArmor": ("1.4 B+, 1.31 G+!", "1.33"),  # W
    "AppArmorFields": ("1.30 B+, 1.31 G+!", "1.33"),  # PR 129497
    "CPUManager": ("1.8 A-, 1.10 B+, 1.26 G+!", "1.33"),  # PR 129296
    "DisableCloudProviders": ("1.22 A-, 1.29 B+, 1.31 G+!", "1.33"),  # PR 130162
    "DisableKubeletCloudCredentialProviders": ("1.23 A-, 1.29 B+, 1.31 G+!", "1.33"),  # PR 130162
    "DevicePluginCDIDevices": ("1.28 A-, 1.29 B+, 1.31 G+!", "1.34"),  # W
    "LegacySidecarContainers": ("1.33 D-", "1.34"),  # in D34, not in S34
    "ElasticIndexedJob": ("1.27 B+, 1.31 G+!", "1.33..1.34"),  # in D33, not in D34
    # In S32, not in D33.
    "AdmissionWebhookMatchConditions": ("1.27 A-, 1.28 B+, 1.30 G+!", "1.32..1.33"),
    "AggregatedDiscoveryEndpoint": ("1.26 A-, 1.27 B+, 1.30 G+!", "1.32..1.33"),
    "APIListChunking": ("1.8 A-, 1.9 B+, 1.29 G+!", "1.32..1.33"),
    "EfficientWatchResumption": ("1.20 A-, 1.21 B+, 1.24 G+!", "1.32..1.33"),
    "HPAContainerMetrics": ("1.20 A-, 1.27 B+, 1.30 G+!", "1.32..1.33"),
    "JobPodFailurePolicy": ("1.25 A-, 1.26 B+, 1.31 G+!", "1.32..1.33"),
    "KubeProxyDrainingTerminatingNodes": ("1.28 A-, 1.30 B+, 1.31 G+!", "1.32..1.33"),
    "RemainingItemCount": ("1.15 A-, 1.16 B+, 1.29 G+!", "1.32..1.33"),
    "WatchBookmark": ("1.15 A-, 1.16 B+, 1.17 G+!", "1.32..1.33"),
    "ZeroLimitedNominalConcurrencyShares": ("1.29 B-, 1.30 G+!", "1.32..1.33"),
    # In S32, not in D34.
    "PDBUnhealthyPodEvictionPolicy": ("1.26 A-, 1.27 B+, 1.31 G+!", "1.32..1.34"),
    "PersistentVolumeLastPhaseTransitionTime": ("1.28 A-, 1.29 B+, 1.31 G+!", "1.32..1.34"),
    "PodDisruptionConditions": ("1.25 A-, 1.26 B+, 1.31 G+!", "1.32..1.34"),
    "StatefulSetStartOrdinal": ("1.26 A-, 1.27 B+, 1.31 G+!", "1.32..1.34"),
    "VolumeCapacityPriority": ("1.21 A-", "1.32..1.34"),
    # Removed in 1.32 (W), or in S31 and not in S32.
    "PodHostIPs": ("1.28 A-, 1.29 B+, 1.30 G+!", "1.32"),  # W
    "NewVolumeManagerReconstruction": ("1.25 A-, 1.27 B+, 1.30 G+!", "1.32"),  # W
    # S28 has no such gate and S31 has it alpha; W's "from 1.26" describes the feature, which
    # was under DynamicResourceAllocation until the split.
    "DRAControlPlaneController": ("1.31 A-", "1.32"),  # W
    "CloudDualStackNodeIPs": ("1.28 A-, 1.31 G+!", "1.31..1.32"),
    "KMSv2": ("1.29 G+!", "1.31..1.32"),
    "KMSv2KDF": ("1.29 G+!", "1.31..1.32"),
    "LegacyServiceAccountTokenCleanUp": ("1.28 A-, 1.30 G+!", "1.31..1.32"),
    "MinDomainsInPodTopologySpread": ("1.28 B+, 1.31 G+!", "1.31..1.32"),
    "NodeOutOfServiceVolumeDetach": ("1.28 G+!", "1.31..1.32"),
    "ServerSideApply": ("1.28 G+!", "1.31..1.32"),
    "ServerSideFieldValidation": ("1.28 G+!", "1.31..1.32"),
    "StableLoadBalancerNodeSet": ("1.28 B+, 1.30 G+!", "1.31..1.32"),
    # In S28, not in S31 (W pins some).
    "ConsistentHTTPGetHandlers": ("1.25 G+", "1.31"),  # W
    "KubeletPodResources": ("1.13 A-, 1.15 B+, 1.28 G+!", "1.30"),  # W
    "KubeletPodResourcesGetAllocatable": ("1.21 A-, 1.23 B+, 1.28 G+!", "1.30"),  # W
    "APIPriorityAndFairness": ("1.28 B+", "1.29..1.31"),
    "APISelfSubjectReview": ("1.28 G+!", "1.29..1.31"),
    "CronJobTimeZone": ("1.28 G+!", "1.29..1.31"),
    "CSIMigrationAzureFile": ("1.28 G+!", "1.29..1.31"),
    "CSIMigrationRBD": ("1.28 D-", "1.29..1.31"),
    "CSIMigrationvSphere": ("1.28 G+!", "1.29..1.31"),
    "CSINodeExpandSecret": ("1.28 B+", "1.29..1.31"),
    "CustomResourceValidationExpressions": ("1.28 B+", "1.29..1.31"),
    "DefaultHostNetworkHostPortsInPodTemplates": ("1.28 D-", "1.29..1.31"),
    "DownwardAPIHugePages": ("1.28 G+!", "1.29..1.31"),
    "ExpandedDNSConfig": ("1.28 G+!", "1.29..1.31"),
    "ExperimentalHostUserNamespaceDefaultingGate": ("1.28 D-!", "1.29..1.31"),
    "GRPCContainerProbe": ("1.28 G+!", "1.29..1.31"),
    "InTreePluginAWSUnregister": ("1.28 A-", "1.29..1.31"),
    "InTreePluginAzureDiskUnregister": ("1.28 A-", "1.29..1.31"),
    "InTreePluginAzureFileUnregister": ("1.28 A-", "1.29..1.31"),
    "InTreePluginGCEUnregister": ("1.28 A-", "1.29..1.31"),
    "InTreePluginOpenStackUnregister": ("1.28 A-", "1.29..1.31"),
    "InTreePluginRBDUnregister": ("1.28 D-", "1.29..1.31"),
    "InTreePluginvSphereUnregister": ("1.28 A-", "1.29..1.31"),
    "IPTablesOwnershipCleanup": ("1.28 G+!", "1.29..1.31"),
    "JobMutableNodeSchedulingDirectives": ("1.28 G+!", "1.29..1.31"),
    "JobReadyPods": ("1.28 B+", "1.29..1.31"),
    "JobTrackingWithFinalizers": ("1.28 G+!", "1.29..1.31"),
    "LegacyServiceAccountTokenNoAutoGeneration": ("1.28 G+!", "1.29..1.31"),
    "LegacyServiceAccountTokenTracking": ("1.28 G+!", "1.29..1.31"),
    "MinimizeIPTablesRestore": ("1.28 G+!", "1.29..1.31"),
    "MultiCIDRRangeAllocator": ("1.28 A-", "1.29..1.31"),
    "OpenAPIV3": ("1.28 G+!", "1.29..1.31"),
    "ProxyTerminatingEndpoints": ("1.28 G+!", "1.29..1.31"),
    "ReadWriteOncePod": ("1.28 B+", "1.29..1.31"),
    "RetroactiveDefaultStorageClass": ("1.28 G+!", "1.29..1.31"),
    "SecurityContextDeny": ("1.28 A-", "1.29..1.31"),
    "ServiceNodePortStaticSubrange": ("1.28 B+", "1.29..1.31"),
    "SkipReadOnlyValidationGCE": ("1.28 A-", "1.29..1.31"),
    "ValidatingAdmissionPolicy": ("1.28 B-", "1.29..1.31"),
    # Removed before 1.29; kept so that GPU guides' old advice gets a precise answer (W).
    "ProbeTerminationGracePeriod": ("1.21 A-, 1.22 B-, 1.25 B+, 1.28 G+", "1.29"),
    "SeccompDefault": ("1.22 A-, 1.25 B+, 1.27 G+", "1.29"),
    "TopologyManager": ("1.16 A-, 1.18 B+, 1.27 G+", "1.29"),
    "DevicePlugins": ("1.8 A-, 1.10 B+, 1.26 G+", "1.28"),
    "DynamicKubeletConfig": ("1.4 A-, 1.11 B+, 1.22 D-", "1.26"),
    "Accelerators": ("1.6 A-, 1.11 D-", "1.12"),
}


def _parse_release(text):
    """(major, minor) from '1.31'; None when the text is not of that form."""
    m = re.match(r"^(\d+)\.(\d+)$", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _fmt(release):
    return "%d.%d" % release


def _parse_tokens(spec):
    states = []
    for token in spec.split(","):
        version, flags = token.split()
        states.append(
            {
                "since": _parse_release(version),
                "stage": _STAGE_NAMES[flags[0]],
                "default": flags[1] == "+",
                "locked": flags.endswith("!"),
            }
        )
    return states


def _parse_removal(text):
    if text is None:
        return None
    if ".." in text:
        lo, hi = text.split("..")
        return (_parse_release(lo), _parse_release(hi))
    release = _parse_release(text)
    return (release, release)


def _build_table():
    table = {}
    for name, spec in _GATES_PRESENT.items():
        table[name] = {"states": _parse_tokens(spec), "removed": None}
    for name, (spec, removal) in _GATES_REMOVED.items():
        table[name] = {"states": _parse_tokens(spec), "removed": _parse_removal(removal)}
    return table


FEATURE_GATES = _build_table()


_USER_VERSION_RE = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+][0-9A-Za-z.+-]*)?\s*$")
_PRINTED_VERSION_RE = re.compile(
    r"(?<![\w.])v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+][0-9A-Za-z.+-]*)?(?![\w.])"
)


def parse_kubernetes_version(text, printed=False):
    """(major, minor) of a Kubernetes version, or None when the text holds none.

    As written by a person (the default): "1.31", "v1.31", "1.31.2", "v1.31.2+k3s1". With
    printed=True, the first version in what a binary printed: "Kubernetes v1.31.2",
    "k3s version v1.31.2+k3s1 (abc)", "rke2 version v1.31.2+rke2r1 (abc)".
    """
    if text is None:
        return None
    pattern = _PRINTED_VERSION_RE if printed else _USER_VERSION_RE
    m = pattern.search(str(text))
    if not m:
        return None
    return (int(m.group(1)), int(m.group(2)))


def gate_state(name, release):
    """What the table knows of a gate at a release (major, minor).

    Returns a dict: status one of "present", "not_yet", "removed", "maybe_removed", "unknown";
    and for known gates stage, default, locked, since (first release), removed_in (first release
    without it, or a (lo, hi) window).
    """
    entry = FEATURE_GATES.get(name)
    if entry is None:
        return {"status": "unknown"}
    states = entry["states"]
    first = states[0]
    info = {"since": first["since"], "first_stage": first["stage"], "removed_in": entry["removed"]}
    removed = entry["removed"]
    if removed is not None and release >= removed[1]:
        info["status"] = "removed"
        return info
    if release < first["since"]:
        info["status"] = "not_yet"
        return info
    current = [s for s in states if s["since"] <= release][-1]
    info.update(stage=current["stage"], default=current["default"], locked=current["locked"])
    if removed is not None and release >= removed[0]:
        info["status"] = "maybe_removed"
    else:
        info["status"] = "present"
    return info


def _gates_at(release):
    return sorted(
        n for n in FEATURE_GATES if gate_state(n, release)["status"] in ("present", "maybe_removed")
    )


def _bool_word(value):
    return "true" if value else "false"


def validate_feature_gates(gates, kubernetes_version, unchecked=()):
    """One message per problem with `gates` (name -> bool) for the kubelet of that version.

    Problems: a value that is not a boolean; a gate the release does not have (never existed,
    not yet added, or removed: the message says which, and when); a locked gate set against its
    locked value. Gates named in `unchecked` are only checked for a boolean value.
    """
    messages = []
    if not gates:
        return messages
    if not isinstance(gates, dict):
        return [
            "feature_gates: must be a mapping of gate name to true or false, got %s"
            % type(gates).__name__
        ]
    unchecked = set(unchecked or ())
    release = parse_kubernetes_version(kubernetes_version)
    lo, hi = SUPPORTED_RELEASES
    version_ok = True
    if release is None:
        messages.append(
            "kubernetes_version: %r is not a Kubernetes version; write it as 1.31 or v1.31.2"
            % (kubernetes_version,)
        )
        version_ok = False
    elif not lo <= release <= hi:
        messages.append(
            "kubernetes_version: %s is outside the releases kubegpu supports (%s to %s), so its "
            "feature gates cannot be checked; use a kubelet from %s to %s"
            % (_fmt(release), _fmt(lo), _fmt(hi), _fmt(lo), _fmt(hi))
        )
        version_ok = False
    for name in sorted(gates, key=str):
        value = gates[name]
        if not isinstance(value, bool):
            messages.append(
                "feature_gates: %r must be true or false, got %r (%s); write the value without "
                "quotes" % (name, value, type(value).__name__)
            )
            continue
        if not version_ok or name in unchecked:
            continue
        messages.extend(_check_gate(str(name), value, release))
    return messages


def _check_gate(name, value, release):
    version = _fmt(release)
    state = gate_state(name, release)
    status = state["status"]
    if status == "unknown":
        close = difflib.get_close_matches(name, _gates_at(release), n=1, cutoff=0.8)
        hint = " Did you mean %r?" % close[0] if close else ""
        return [
            "feature_gates: %r is not a feature gate of Kubernetes %s (no release kubegpu knows "
            "of has it).%s Remove it, or if your kubelet does have it, list it in "
            "unchecked_feature_gates." % (name, version, hint)
        ]
    if status == "not_yet":
        return [
            "feature_gates: %r does not exist in Kubernetes %s; it was added in %s (%s). Remove "
            "it, or use a kubelet of %s or later."
            % (name, version, _fmt(state["since"]), state["first_stage"], _fmt(state["since"]))
        ]
    if status == "removed":
        lo, hi = state["removed_in"]
        when = "in %s" % _fmt(lo) if lo == hi else "in %s or %s" % (_fmt(lo), _fmt(hi))
        if lo != hi and hi[1] - lo[1] > 1:
            when = "between %s and %s" % (_fmt(lo), _fmt(hi))
        return [
            "feature_gates: %r was removed from Kubernetes %s; the kubelet of %s does not have it "
            "and would refuse to start. Remove it." % (name, when, version)
        ]
    if state["locked"] and value != state["default"]:
        return [
            "feature_gates: %r is locked to %s in Kubernetes %s (%s); the kubelet refuses to "
            "start with %s=%s. Set it to %s or remove it."
            % (
                name,
                _bool_word(state["default"]),
                version,
                state["stage"],
                name,
                _bool_word(value),
                _bool_word(state["default"]),
            )
        ]
    return []


# ---------------------------------------------------------------------------------------------
# Node labels and taints
# ---------------------------------------------------------------------------------------------
#
# Syntax (k8s.io/apimachinery validation): a key is an optional prefix, a DNS subdomain of at
# most 253 characters, and "/", then a name of at most 63 characters, alphanumeric at both ends
# with '-', '_' and '.' inside. A value is empty or up to 63 characters of the same alphabet,
# alphanumeric at both ends. Taint keys and values follow the same rules.
#
# Self-labelling (k8s.io/kubelet/pkg/apis/well_known_labels.go and the kubelet's --node-labels
# check): a key whose prefix is kubernetes.io or k8s.io, or a subdomain of either, is refused
# unless it is one of the labels below or its prefix is kubelet.kubernetes.io or
# node.kubernetes.io (or a subdomain of them). The kubelet exits at startup on such a label, and
# the NodeRestriction admission plugin refuses it on the Node object.

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

KUBELET_ALLOWED_LABELS = (
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/os",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "kubernetes.io/arch",
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
)
KUBELET_ALLOWED_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")
_RESTRICTED_NAMESPACES = ("kubernetes.io", "k8s.io")

_NAME_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_RE = re.compile(r"^%s(\.%s)*$" % (_DNS_LABEL, _DNS_LABEL))
_NAME_RULE = (
    "63 characters or fewer, start and end with a letter or digit, and contain only letters, "
    "digits, '-', '_' and '.'"
)


def _in_namespace(namespace, parent):
    return namespace == parent or namespace.endswith("." + parent)


def _key_namespace(key):
    return key.split("/", 1)[0] if "/" in key else ""


def is_kubelet_self_label(key):
    """True when a kubelet may set this label key on its own Node (NodeRestriction rules)."""
    namespace = _key_namespace(key)
    if not any(_in_namespace(namespace, ns) for ns in _RESTRICTED_NAMESPACES):
        return True
    if key in KUBELET_ALLOWED_LABELS:
        return True
    return any(_in_namespace(namespace, ns) for ns in KUBELET_ALLOWED_LABEL_NAMESPACES)


def split_node_labels(labels):
    """(self_settable, api_only): labels a kubelet may set on itself, and those only the API may.

    Labels in the second dict must be applied by a cluster administrator through the API
    (role gpu_cluster); a kubelet given them refuses to start.
    """
    own, api_only = {}, {}
    for key, value in (labels or {}).items():
        (own if is_kubelet_self_label(str(key)) else api_only)[key] = value
    return own, api_only


def _key_problems(key, where):
    if not isinstance(key, str):
        return ["%s: key %r must be a string" % (where, key)]
    if not key:
        return ["%s: a key is empty; keys look like example.com/name or name" % where]
    bad = "%s: key %r is not a valid key: " % (where, key)
    if key.count("/") > 1:
        return [bad + "it may hold at most one '/', between the prefix and the name"]
    prefix, _, name = key.rpartition("/")
    problems = []
    if "/" in key and (not prefix or len(prefix) > 253 or not _SUBDOMAIN_RE.match(prefix)):
        problems.append(
            bad + "the prefix %r must be a DNS subdomain (lowercase letters, digits, '-' and "
            "'.', each part starting and ending with a letter or digit, at most 253 "
            "characters)" % prefix
        )
    if not name or len(name) > 63 or not _NAME_RE.match(name):
        problems.append(bad + "the name %r must be %s" % (name, _NAME_RULE))
    return problems


def _value_problems(value, where, kind="label"):
    if not isinstance(value, str):
        return [
            '%s must be a string, got %r (%s); quote it in YAML, for example "%s"'
            % (where, value, type(value).__name__, _yaml_scalar_text(value))
        ]
    if value == "" or (len(value) <= 63 and _NAME_RE.match(value)):
        return []
    suggestion = sanitize_label_value(value)
    hint = "; for example %r" % suggestion if suggestion and suggestion != value else ""
    return [
        "%s is %r, which is not a valid %s value: it must be empty or %s%s"
        % (where, value, kind, _NAME_RULE, hint)
    ]


def _yaml_scalar_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def validate_node_labels(labels):
    """One message per problem with node labels (key -> value) a kubelet is to set on itself."""
    if not labels:
        return []
    if not isinstance(labels, dict):
        return [
            "node_labels: must be a mapping of label key to value, got %s" % type(labels).__name__
        ]
    messages = []
    for key in sorted(labels, key=str):
        key_problems = _key_problems(key, "node_labels")
        messages.extend(key_problems)
        messages.extend(_value_problems(labels[key], "node_labels: the value of %r" % (key,)))
        if not key_problems and not is_kubelet_self_label(key):
            namespace = _key_namespace(key)
            root = next(ns for ns in _RESTRICTED_NAMESPACES if _in_namespace(namespace, ns))
            messages.append(
                "node_labels: %r is in the %s namespace, where a kubelet may not label its own "
                "node (NodeRestriction): the kubelet refuses to start with it. In the "
                "kubernetes.io and k8s.io namespaces a kubelet may only set keys under %s (or "
                "their subdomains) and %s. Use a prefix of your own (for example nvidia.com/ or "
                "example.com/), or set the label through the API (role gpu_cluster)."
                % (
                    key,
                    root,
                    " or ".join(p + "/" for p in KUBELET_ALLOWED_LABEL_NAMESPACES),
                    ", ".join(KUBELET_ALLOWED_LABELS),
                )
            )
    return messages


def _parse_taint_text(text):
    """{'key','value','effect'} from 'key=value:Effect' or 'key:Effect'; None when malformed."""
    if ":" not in text:
        return None
    left, _, effect = text.rpartition(":")
    key, sep, value = left.partition("=")
    return {"key": key, "value": value if sep else "", "effect": effect}


def normalize_taints(taints):
    """Taints (dicts or 'key=value:Effect' strings) as dicts with key, value and effect."""
    result = []
    for taint in taints or []:
        if isinstance(taint, str):
            parsed = _parse_taint_text(taint)
        else:
            parsed = {
                "key": taint.get("key"),
                "value": taint.get("value") if taint.get("value") is not None else "",
                "effect": taint.get("effect"),
            }
        result.append(parsed)
    return result


def format_taint(taint):
    if taint.get("value"):
        return "%s=%s:%s" % (taint["key"], taint["value"], taint["effect"])
    return "%s:%s" % (taint["key"], taint["effect"])


def validate_taints(taints):
    """One message per problem with taints to register the node with.

    Each taint is a mapping with key, optional value and effect, or a string key=value:Effect.
    """
    if not taints:
        return []
    if not isinstance(taints, list):
        return ["node_taints: must be a list of taints, got %s" % type(taints).__name__]
    messages = []
    seen = {}
    for index, taint in enumerate(taints):
        where = "node_taints[%d]" % index
        if isinstance(taint, str):
            parsed = _parse_taint_text(taint)
            if parsed is None:
                messages.append(
                    "%s: %r is not a taint; write key=value:Effect or key:Effect, or a mapping "
                    "with key, value and effect" % (where, taint)
                )
                continue
        elif isinstance(taint, dict):
            extra = sorted(set(map(str, taint)) - {"key", "value", "effect"})
            if extra:
                messages.append(
                    "%s: unknown field(s) %s; a taint has key, value and effect"
                    % (where, ", ".join(extra))
                )
            parsed = {
                "key": taint.get("key"),
                "value": taint.get("value") if taint.get("value") is not None else "",
                "effect": taint.get("effect"),
            }
            if parsed["key"] is None:
                messages.append("%s: the key is missing" % where)
                parsed["key"] = ""
                continue
        else:
            messages.append(
                "%s: must be a mapping with key, value and effect, or a string "
                "key=value:Effect, got %s" % (where, type(taint).__name__)
            )
            continue
        key_problems = _key_problems(parsed["key"], where)
        messages.extend(key_problems)
        messages.extend(_value_problems(parsed["value"], "%s: the value" % where, "taint"))
        if parsed["effect"] not in TAINT_EFFECTS:
            messages.append(
                "%s: effect %r is not one of %s"
                % (where, parsed["effect"], ", ".join(TAINT_EFFECTS))
            )
            continue
        if key_problems:
            continue
        identity = (parsed["key"], parsed["effect"])
        if identity in seen:
            messages.append(
                "%s: same key %r and effect %s as node_taints[%d]; a node holds one taint per "
                "key and effect" % (where, parsed["key"], parsed["effect"], seen[identity])
            )
        else:
            seen[identity] = index
    return messages


def sanitize_label_value(text):
    """A label value made from free text, such as a GPU product name.

    First what GPU Feature Discovery does to product names (k8s-device-plugin
    internal/lm/resource.go: every space becomes '-', so "Tesla K80" -> "Tesla-K80"), then what
    kubegpu adds so that the result is always a valid label value: other characters outside
    letters, digits, '-', '_' and '.' become '-', the text is cut to 63 characters, and
    characters other than letters and digits are stripped from both ends.
    """
    value = str(text).strip().replace(" ", "-")
    value = re.sub(r"[^A-Za-z0-9._-]", "-", value)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def gfd_product_value(model, mig_profile=None):
    """The nvidia.com/gpu.product value GPU Feature Discovery writes for a GPU (or MIG device).

    GFD joins the non-empty parts (model, and "MIG" and the profile for MIG devices) with '-',
    after turning the spaces in each part into '-'. Time-slicing adds "-SHARED" (not modelled).
    """
    parts = [model] + (["MIG", mig_profile] if mig_profile else [])
    return "-".join(p.replace(" ", "-") for p in parts if p)


# ---------------------------------------------------------------------------------------------
# KubeletConfiguration settings
# ---------------------------------------------------------------------------------------------

KUBELET_CONFIG_API_VERSION = "kubelet.config.k8s.io/v1beta1"
KUBELET_CONFIG_KIND = "KubeletConfiguration"
_FIELD_RE = re.compile(r"^[a-z][A-Za-z0-9]*$")


def validate_settings(settings):
    """One message per problem with settings to merge into the KubeletConfiguration."""
    if not settings:
        return []
    if not isinstance(settings, dict):
        return [
            "settings: must be a mapping of KubeletConfiguration fields, got %s"
            % type(settings).__name__
        ]
    messages = []
    for key in sorted(settings, key=str):
        if key in ("apiVersion", "kind"):
            messages.append(
                "settings: %r is set by kubegpu (%s); remove it from settings"
                % (key, KUBELET_CONFIG_API_VERSION if key == "apiVersion" else KUBELET_CONFIG_KIND)
            )
        elif key == "featureGates":
            messages.append(
                "settings: put feature gates in feature_gates, not settings.featureGates, so "
                "that they are checked against the kubelet's version"
            )
        elif not isinstance(key, str) or not _FIELD_RE.match(key):
            camel = re.sub(r"[_-]([a-z0-9])", lambda m: m.group(1).upper(), str(key))
            messages.append(
                "settings: %r is not a KubeletConfiguration field name; fields are camelCase, "
                "for example %s" % (key, camel[:1].lower() + camel[1:])
            )
    return messages


def deep_merge(base, override):
    """A copy of base with override merged in: mappings merge key by key, other values replace."""
    result = copy.deepcopy(base) if base else {}
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = deep_merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def merge_kubelet_config(existing, feature_gates=None, settings=None):
    """The KubeletConfiguration `existing` (a dict, or None for a new file) with ours merged in.

    Every other key is kept; settings are merged deeply; featureGates are merged gate by gate.
    """
    result = copy.deepcopy(existing) if existing else {}
    if not result:
        result = {"apiVersion": KUBELET_CONFIG_API_VERSION, "kind": KUBELET_CONFIG_KIND}
    result = deep_merge(result, settings or {})
    if feature_gates:
        gates = result.get("featureGates")
        gates = dict(gates) if isinstance(gates, dict) else {}
        gates.update(feature_gates)
        result["featureGates"] = gates
    return result


def build_dropin_config(feature_gates=None, settings=None):
    """A kubelet drop-in file's content (owned by kubegpu): apiVersion, kind, settings, gates."""
    return merge_kubelet_config(None, feature_gates, settings)


# ---------------------------------------------------------------------------------------------
# Kubelet flags: KUBELET_EXTRA_ARGS (kubeadm packages) and k3s/RKE2 config.yaml
# ---------------------------------------------------------------------------------------------

EXTRA_ARGS_VARIABLE = "KUBELET_EXTRA_ARGS"
_TOKEN_RE = re.compile(r"""(?:[^\s"']+|"[^"]*"|'[^']*')+""")


def _unquote(raw):
    return re.sub(r""""([^"]*)"|'([^']*)'""", lambda m: m.group(1) or m.group(2) or "", raw)


def parse_label_list(text):
    """Ordered (key, value) pairs from 'a=b,c=d'."""
    pairs = []
    for item in text.split(","):
        if item.strip():
            key, _, value = item.strip().partition("=")
            pairs.append((key, value))
    return pairs


def merge_labels(existing_pairs, labels):
    """Existing (key, value) pairs with ours: ours replace same keys, new ones are appended."""
    merged = []
    done = set()
    for key, value in existing_pairs:
        if key in labels:
            if key not in done:
                merged.append((key, str(labels[key])))
                done.add(key)
        elif key not in done:
            merged.append((key, value))
            done.add(key)
    for key in labels:
        if key not in done:
            merged.append((key, str(labels[key])))
            done.add(key)
    return merged


def merge_taints(existing_texts, taints):
    """Existing taint strings with ours: a taint of ours replaces one with the same key+effect."""
    ours = {(t["key"], t["effect"]): t for t in taints}
    merged = []
    done = set()
    for text in existing_texts:
        parsed = _parse_taint_text(text)
        identity = (parsed["key"], parsed["effect"]) if parsed else None
        if identity in ours:
            if identity not in done:
                merged.append(format_taint(ours[identity]))
                done.add(identity)
        elif identity is None or identity not in done:
            merged.append(text)
            if identity:
                done.add(identity)
    for identity, taint in ours.items():
        if identity not in done:
            merged.append(format_taint(taint))
    return merged


def _split_args(value):
    """Tokens of a command line: (flag name or None, value or None, raw) per argument."""
    raws = _TOKEN_RE.findall(value)
    args = []
    i = 0
    while i < len(raws):
        raw = raws[i]
        text = _unquote(raw)
        if text.startswith("--"):
            name, sep, flag_value = text.partition("=")
            if sep:
                args.append([name, flag_value, raw])
            elif i + 1 < len(raws) and not _unquote(raws[i + 1]).startswith("-"):
                args.append([name, _unquote(raws[i + 1]), raw + " " + raws[i + 1]])
                i += 1
            else:
                args.append([name, None, raw])
        else:
            args.append([None, text, raw])
        i += 1
    return args


def _merged_flag_values(args, node_labels, node_taints, flags):
    """Wanted value per managed flag, given the current arguments."""
    wanted = {}
    if node_labels:
        pairs = []
        for name, value, _raw in args:
            if name == "--node-labels" and value:
                pairs.extend(parse_label_list(value))
        wanted["--node-labels"] = ",".join("%s=%s" % kv for kv in merge_labels(pairs, node_labels))
    if node_taints:
        texts = []
        for name, value, _raw in args:
            if name == "--register-with-taints" and value:
                texts.extend(t for t in value.split(",") if t.strip())
        wanted["--register-with-taints"] = ",".join(merge_taints(texts, node_taints))
    for name, value in (flags or {}).items():
        wanted[name] = value
    return wanted


def merge_extra_args(value, node_labels=None, node_taints=None, flags=None):
    """The KUBELET_EXTRA_ARGS value with our flags merged in, or None when nothing changes.

    --node-labels and --register-with-taints are merged as lists (other labels and taints stay);
    flags in `flags` (name -> value) are set. Every other argument is kept as written.
    """
    args = _split_args(value)
    wanted = _merged_flag_values(args, node_labels, node_taints, flags)
    current = {}
    counts = {}
    for name, flag_value, raw in args:
        if name in wanted:
            counts[name] = counts.get(name, 0) + 1
            current[name] = (flag_value, raw)
    if all(
        counts.get(name) == 1 and current[name][1] == "%s=%s" % (name, wanted[name])
        for name in wanted
    ):
        return None
    out = []
    placed = set()
    for name, _flag_value, raw in args:
        if name in wanted:
            if name not in placed:
                out.append("%s=%s" % (name, wanted[name]))
                placed.add(name)
        else:
            out.append(raw)
    for name in wanted:
        if name not in placed:
            out.append("%s=%s" % (name, wanted[name]))
    return " ".join(out)


_ASSIGN_RE = re.compile(r"^(\s*(?:export\s+)?)([A-Za-z_][A-Za-z0-9_]*)=(.*?)(\r?\n)?$")


def merge_extra_args_file(text, node_labels=None, node_taints=None, flags=None, env=None):
    """An /etc/default/kubelet (or /etc/sysconfig/kubelet) text with our settings merged in.

    Only the last KUBELET_EXTRA_ARGS line changes (or one is appended); every other line, comment
    and blank stays byte for byte. `env` (name -> value) are further variables the kubelet's
    unit reads from the same file; a line is added or replaced for each. Returns the new text,
    equal to `text` when nothing changes.
    """
    lines = (text or "").splitlines(True)
    index = None
    for i, line in enumerate(lines):
        m = _ASSIGN_RE.match(line)
        if m and m.group(2) == EXTRA_ARGS_VARIABLE:
            index = i
    if index is None:
        new_value = merge_extra_args("", node_labels, node_taints, flags)
        if new_value is not None:
            if lines and not lines[-1].endswith("\n"):
                lines[-1] += "\n"
            # Quoted, so that the file also reads right when a shell sources it.
            lines.append('%s="%s"\n' % (EXTRA_ARGS_VARIABLE, new_value))
    else:
        m = _ASSIGN_RE.match(lines[index])
        lead, raw_value, eol = m.group(1), m.group(3), m.group(4) or ""
        quote = ""
        stripped = raw_value.strip()
        if len(stripped) >= 2 and stripped[0] == stripped[-1] and stripped[0] in "\"'":
            quote, inner = stripped[0], stripped[1:-1]
        else:
            inner = stripped
        new_value = merge_extra_args(inner, node_labels, node_taints, flags)
        if new_value is not None:
            lines[index] = "%s%s=%s%s%s%s" % (
                lead,
                EXTRA_ARGS_VARIABLE,
                quote,
                new_value,
                quote,
                eol,
            )
    for name, value in (env or {}).items():
        wanted = "%s=%s" % (name, value)
        found = False
        for i, line in enumerate(lines):
            m = _ASSIGN_RE.match(line)
            if m and m.group(2) == name:
                found = True
                if m.group(3).strip().strip("\"'") != str(value):
                    lines[i] = wanted + (m.group(4) or "")
        if not found:
            if lines and not lines[-1].endswith("\n"):
                lines[-1] += "\n"
            lines.append(wanted + "\n")
    return "".join(lines)


def _as_list(value):
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value]
    return [str(value)]


def merge_rancher_config(
    data, node_labels=None, node_taints=None, kubelet_args=None, feature_gates=None
):
    """A k3s or RKE2 config.yaml (as data) with ours merged in; other keys stay as they are.

    node-label ("key=value") and node-taint ("key=value:Effect") lists are merged like the
    kubelet flags; kubelet-arg entries ("name=value") are set by name, and feature gates are
    merged into the feature-gates entry gate by gate.
    """
    result = copy.deepcopy(data) if data else {}
    if node_labels:
        pairs = [tuple(t.partition("=")[::2]) for t in _as_list(result.get("node-label"))]
        result["node-label"] = ["%s=%s" % kv for kv in merge_labels(pairs, node_labels)]
    if node_taints:
        result["node-taint"] = merge_taints(_as_list(result.get("node-taint")), node_taints)
    wanted = dict(kubelet_args or {})
    if feature_gates:
        existing = ""
        for item in _as_list(result.get("kubelet-arg")):
            name, _, value = item.lstrip("-").partition("=")
            if name == "feature-gates":
                existing = value
        gates = [tuple(p.partition("=")[::2]) for p in existing.split(",") if p.strip()]
        merged = merge_labels(gates, dict((k, _bool_word(v)) for k, v in feature_gates.items()))
        wanted["feature-gates"] = ",".join("%s=%s" % kv for kv in merged)
    if wanted:
        out = []
        placed = set()
        for item in _as_list(result.get("kubelet-arg")):
            name = item.lstrip("-").partition("=")[0]
            if name in wanted:
                if name not in placed:
                    out.append("%s=%s" % (name, wanted[name]))
                    placed.add(name)
            else:
                out.append(item)
        for name, value in wanted.items():
            if name not in placed:
                out.append("%s=%s" % (name, value))
        result["kubelet-arg"] = out
    return result


# ---------------------------------------------------------------------------------------------
# What to write where, per kubelet layout
# ---------------------------------------------------------------------------------------------

FLAVORS = ("kubeadm", "k3s", "rke2")
DEFAULT_PATHS = {
    "kubeadm": "/var/lib/kubelet/config.yaml",
    "k3s": "/etc/rancher/k3s/config.yaml",
    "rke2": "/etc/rancher/rke2/config.yaml",
}
DROPIN_ALPHA_ENV = "KUBELET_CONFIG_DROPIN_DIR_ALPHA"
# --config-dir: alpha in 1.28 and 1.29 (only with the environment variable above set), beta from
# 1.30, GA in 1.35 (kubernetes/website tasks/administer-cluster/kubelet-config-file.md; KEP-3983).
DROPIN_SINCE = (1, 28)
DROPIN_ENV_UNTIL = (1, 29)


class KubeletConfigError(Exception):
    """A file on the host cannot be merged into (unreadable YAML, not the expected kind)."""


def dropin_path(config_dir, dropin_name):
    """The kubegpu drop-in file in the kubelet's drop-in directory."""
    return config_dir.rstrip("/") + "/" + dropin_name


def plan_kubelet_files(
    flavor,
    read,
    load_yaml,
    dump_yaml,
    config_path,
    extra_args_path=None,
    feature_gates=None,
    settings=None,
    node_labels=None,
    node_taints=None,
    config_dir=None,
    dropin_name="50-kubegpu.conf",
    release=None,
):
    """The files to change, as dicts with path, before (None: absent), after and mode.

    read(path) returns a file's text or None; load_yaml(text) and dump_yaml(data) convert. Only
    files whose content would change are returned. Raises KubeletConfigError.
    """
    taints = normalize_taints(node_taints)
    plans = []

    def load(path, text):
        if text is None or not text.strip():
            return {}
        try:
            data = load_yaml(text)
        except Exception as exc:
            raise KubeletConfigError("%s is not valid YAML: %s" % (path, exc)) from exc
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise KubeletConfigError(
                "%s holds a %s, not a mapping; kubegpu merges only into a mapping"
                % (path, type(data).__name__)
            )
        return data

    def add(path, before, data, mode, before_data):
        if before is not None and data == before_data:
            return
        plans.append({"path": path, "before": before, "after": dump_yaml(data), "mode": mode})

    dropin = None
    if config_dir and (feature_gates or settings):
        dropin = dropin_path(config_dir, dropin_name)
        before = read(dropin)
        add(
            dropin,
            before,
            build_dropin_config(feature_gates, settings),
            0o644,
            load(dropin, before),
        )

    if flavor == "kubeadm":
        if not dropin and (feature_gates or settings):
            before = read(config_path)
            existing = load(config_path, before)
            kind = existing.get("kind")
            if existing and kind != KUBELET_CONFIG_KIND:
                raise KubeletConfigError(
                    "%s is a %r, not a %s; point config_path at the kubelet's --config file"
                    % (config_path, kind, KUBELET_CONFIG_KIND)
                )
            add(
                config_path,
                before,
                merge_kubelet_config(existing, feature_gates, settings),
                0o644,
                existing,
            )
        flags = {"--config-dir": config_dir} if dropin else {}
        env = {}
        if dropin and release is not None and release <= DROPIN_ENV_UNTIL:
            env[DROPIN_ALPHA_ENV] = "on"
        if node_labels or taints or flags or env:
            before = read(extra_args_path)
            after = merge_extra_args_file(before or "", node_labels, taints, flags, env)
            if after != (before or ""):
                plans.append(
                    {"path": extra_args_path, "before": before, "after": after, "mode": 0o644}
                )
    else:
        before = read(config_path)
        existing = load(config_path, before)
        kubelet_args = {"config-dir": config_dir} if dropin else {}
        gates_as_flag = None if dropin else feature_gates
        if node_labels or taints or kubelet_args or gates_as_flag:
            merged = merge_rancher_config(
                existing, node_labels, taints, kubelet_args, gates_as_flag
            )
            add(config_path, before, merged, 0o600, existing)
    return plans
