# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Kubernetes feature gates by release: data only, read by module_utils/kubelet.py.

This module holds literals and nothing else (no functions, no imports), so that the table can
be reviewed, and compared with upstream by scripts/feature-gates, apart from the validators.
It is a .py file because module_utils travel to nodes with the modules that use them, and only
Python files travel.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

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

# Present in S36 (so in every release from their first token through 1.35). Exceptions noted.
GATES_PRESENT = {
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
GATES_REMOVED = {
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
    "ExperimentalHostUserNamespaceDefaulting": ("1.28 D-!", "1.29..1.31"),
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
