# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Tenants' objects and the apply plan, from checked gpu_tenancy settings.

Pure functions of their arguments (no API calls, no files), used by the gpu_tenancy role through
the kubegpu.gpu tenancy filters, by the example renderer and by the tests:

- render_tenants(settings, adopted, advertised) -> [manifest, ...]: Namespace, ResourceQuota,
  LimitRange, Role, RoleBinding and NetworkPolicies of every tenant, in apply order.
- plan(settings, namespaces, owned, nodes) -> {manifests, delete, release, adopted, errors}:
  what to apply and, when pruning, what to delete, from what the cluster holds now.

A tenant's quota caps every GPU resource, not only those it is given: whole GPUs
(nvidia.com/gpu), time-sliced replicas under their own name (nvidia.com/gpu.shared) and every
GPU resource a node of the cluster advertises (the MIG slices of the mixed strategy,
nvidia.com/mig-<profile>) at 0 unless the tenant lists it. A MIG profile that appears on a node
later is capped by the next run.

The settings come from tenancy_settings.validate_settings. ResourceQuota on cpu or memory makes
every container state them, hence the LimitRange defaults. A LimitRange `max` without a default
makes every container ask for that resource, hence GPU defaults of 0.

Runs on the controller's Python (3.8+ syntax), from the collection on disk.
"""

from __future__ import absolute_import, division, print_function

import copy
import re

from ansible_collections.kubegpu.gpu.plugins.module_utils.data_files import read_yaml
from ansible_collections.kubegpu.gpu.plugins.module_utils.k8s_values import parse_quantity
from ansible_collections.kubegpu.gpu.plugins.module_utils.tenancy_settings import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    PREFIX,
)

__metaclass__ = type

TENANT_LABEL = "kubegpu.io/tenant"
# Tenant objects carry managed-by and the tenant label, and deliberately NOT
# app.kubernetes.io/part-of=kubegpu: the gpu_cluster role prunes and resets everything that has
# both managed-by and part-of, and must never take tenants' namespaces with it.
OWNED_SELECTOR = "%s=%s,%s" % (MANAGED_BY_LABEL, MANAGED_BY, TENANT_LABEL)
DESCRIPTION_ANNOTATION = "kubegpu.io/description"
PRODUCTS_ANNOTATION = "kubegpu.io/gpu-products"
PSA_REASON_ANNOTATION = "kubegpu.io/pod-security-reason"
PSA_PREFIX = "pod-security.kubernetes.io/"

QUOTA_NAME = "kubegpu-tenant-quota"
LIMITS_NAME = "kubegpu-tenant-limits"
ROLE_NAME = "kubegpu-tenant-member"
BINDING_NAME = "kubegpu-tenant-members"
DENY_ALL_NAME = "kubegpu-default-deny"
SAME_NAMESPACE_NAME = "kubegpu-allow-same-namespace"
DNS_NAME = "kubegpu-allow-dns"


def tenant_labels(name):
    return {MANAGED_BY_LABEL: MANAGED_BY, TENANT_LABEL: name}


def _meta(name, tenant, namespace=None, extra_labels=None, annotations=None):
    labels = tenant_labels(tenant)
    labels.update(extra_labels or {})
    meta = {"name": name, "labels": labels}
    if namespace is not None:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = annotations
    return meta


def namespace_manifest(settings, tenant, adopted=False):
    """The tenant's Namespace. An adopted namespace (one kubegpu did not create) gets the tenant
    and Pod Security labels but not managed-by, so that kubegpu never deletes it."""
    level = tenant["pod_security"]["level"]
    version = settings["pod_security_version"]
    psa = {}
    for mode in ("enforce", "audit", "warn"):
        psa[PSA_PREFIX + mode] = level
        psa[PSA_PREFIX + mode + "-version"] = version
    annotations = {}
    if tenant["description"]:
        annotations[DESCRIPTION_ANNOTATION] = tenant["description"]
    if tenant["gpu_products"]:
        annotations[PRODUCTS_ANNOTATION] = ",".join(tenant["gpu_products"])
    if tenant["pod_security"]["reason"]:
        annotations[PSA_REASON_ANNOTATION] = tenant["pod_security"]["reason"]
    meta = _meta(tenant["name"], tenant["name"], extra_labels=psa, annotations=annotations)
    if adopted:
        del meta["labels"][MANAGED_BY_LABEL]
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


# The GPU resources the device plugin advertises: whole GPUs, time-sliced replicas renamed
# (renameByDefault) and MIG slices (mixed strategy).
GPU_RESOURCE_FAMILY = re.compile(r"\Anvidia\.com/(gpu|gpu\.shared|mig-[0-9a-z.-]+)\Z")
# Capped for every tenant whether or not a node advertises them yet.
ALWAYS_CAPPED = ("nvidia.com/gpu", "nvidia.com/gpu.shared")
# ResourceQuota's name for the devices of one DRA DeviceClass: <class> + this.
DEVICE_CLASS_QUOTA = ".deviceclass.resource.k8s.io/devices"


def advertised_gpu_resources(nodes):
    """The GPU resources (GPU_RESOURCE_FAMILY) that any of the Node objects has in its status
    capacity or allocatable, sorted."""
    found = set()
    for node in nodes or []:
        status = (node or {}).get("status") or {}
        for field in ("capacity", "allocatable"):
            for name in status.get(field) or {}:
                if GPU_RESOURCE_FAMILY.match(str(name)):
                    found.add(str(name))
    return sorted(found)


def quota_hard(tenant, advertised=()):
    """The ResourceQuota's spec.hard for a tenant (quantities as strings): its GPU resources at
    their counts, every other GPU resource (ALWAYS_CAPPED and those advertised) at 0; NodePort
    and LoadBalancer Services at the tenant's `services` (0 unless given); DRA devices per
    DeviceClass at its `devices` (NVIDIA's GPU and MIG classes 0 unless given)."""
    hard = {}
    for resource in set(ALWAYS_CAPPED).union(advertised):
        if resource not in tenant["gpus"]:
            hard["requests." + resource] = "0"
    for resource, count in sorted(tenant["gpus"].items()):
        hard["requests." + resource] = count
    hard = dict(sorted(hard.items()))
    for key, pair in (("cpu", tenant["cpu"]), ("memory", tenant["memory"])):
        if pair["requests"] is not None:
            hard["requests." + key] = pair["requests"]
        if pair["limits"] is not None:
            hard["limits." + key] = pair["limits"]
    if tenant["pods"] is not None:
        hard["pods"] = tenant["pods"]
    for key, count in sorted(tenant.get("services", {}).items()):
        hard["services." + key] = count
    # DRA: the devices its claims may hold, per DeviceClass (NVIDIA's GPU classes at 0 unless
    # given), as the quota names them.
    for name, count in sorted(tenant.get("devices", {}).items()):
        hard[name + DEVICE_CLASS_QUOTA] = count
    return hard


def _min_quantity(a, b):
    if b is None:
        return a
    return a if parse_quantity(a) <= parse_quantity(b) else b


def limit_range_limits(tenant):
    """The LimitRange's spec.limits: CPU and memory defaults (every container must state them
    where a quota counts them), and for each GPU resource a default and default request of 0
    (requests equal limits, so non-GPU containers stay without GPUs) and a per-container max."""
    defaults = tenant["container_defaults"]
    default = {"cpu": defaults["cpu_limit"], "memory": defaults["memory_limit"]}
    default_request = {"cpu": defaults["cpu_request"], "memory": defaults["memory_request"]}
    maximum = {}
    for resource, count in sorted(tenant["gpus"].items()):
        default[resource] = "0"
        default_request[resource] = "0"
        maximum[resource] = _min_quantity(count, tenant["max_gpus_per_container"])
    return [
        {"type": "Container", "default": default, "defaultRequest": default_request, "max": maximum}
    ]


# What tenants' members may do in their namespace (data/tenant-role-rules.yaml).
ROLE_RULES = read_yaml("tenant-role-rules.yaml")


def role_manifest(tenant):
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(ROLE_NAME, tenant["name"], tenant["name"]),
        "rules": copy.deepcopy(ROLE_RULES),
    }


def role_binding_manifest(tenant):
    subjects = [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": m["kind"], "name": m["name"]}
        for m in sorted(tenant["members"], key=lambda m: (m["kind"], m["name"]))
    ]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(BINDING_NAME, tenant["name"], tenant["name"]),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE_NAME},
        "subjects": subjects,
    }


def network_policies(settings, tenant):
    ns = tenant["name"]
    out = [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": _meta(DENY_ALL_NAME, ns, ns),
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": _meta(SAME_NAMESPACE_NAME, ns, ns),
            "spec": {
                "podSelector": {},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [{"podSelector": {}}]}],
                "egress": [{"to": [{"podSelector": {}}]}],
            },
        },
    ]
    if settings["dns_egress"]:
        out.append(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": _meta(DNS_NAME, ns, ns),
                "spec": {
                    "podSelector": {},
                    "policyTypes": ["Egress"],
                    "egress": [
                        {
                            "to": [
                                {
                                    "namespaceSelector": {
                                        "matchLabels": {
                                            "kubernetes.io/metadata.name": settings["dns_namespace"]
                                        }
                                    },
                                    "podSelector": {
                                        "matchLabels": dict(settings["dns_pod_labels"])
                                    },
                                }
                            ],
                            "ports": [
                                {"protocol": "UDP", "port": 53},
                                {"protocol": "TCP", "port": 53},
                            ],
                        }
                    ],
                },
            }
        )
    return out


def render_tenant(settings, tenant, adopted=False, advertised=()):
    """Every object of one tenant, namespace first."""
    ns = tenant["name"]
    out = [namespace_manifest(settings, tenant, adopted)]
    out.append(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": _meta(QUOTA_NAME, ns, ns),
            "spec": {"hard": quota_hard(tenant, advertised)},
        }
    )
    out.append(
        {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": _meta(LIMITS_NAME, ns, ns),
            "spec": {"limits": limit_range_limits(tenant)},
        }
    )
    out.append(role_manifest(tenant))
    out.append(role_binding_manifest(tenant))
    out.extend(network_policies(settings, tenant))
    return out


def render_tenants(settings, adopted=(), advertised=()):
    """advertised: the GPU resources the cluster's nodes advertise (advertised_gpu_resources)."""
    out = []
    for tenant in settings["tenants"]:
        out.extend(render_tenant(settings, tenant, tenant["name"] in adopted, advertised))
    return out


# Kinds the role reads back to prune, in the order they are deleted (namespace last).
OWNED_KINDS = (
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("v1", "LimitRange"),
    ("v1", "ResourceQuota"),
    ("v1", "Namespace"),
)


def object_ref(obj):
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "namespace": meta.get("namespace") or "",
        "name": meta.get("name"),
    }


def _ref_key(ref):
    return (ref["apiVersion"], ref["kind"], ref.get("namespace") or "", ref["name"])


def is_owned(obj):
    """kubegpu made this object for a tenant: managed-by=kubegpu and a tenant label."""
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(MANAGED_BY_LABEL) == MANAGED_BY and bool(labels.get(TENANT_LABEL))


def plan(settings, namespaces, owned, nodes=None):
    """What to apply, and (when pruning) what to delete, given the cluster's current state.

    namespaces: the Namespace objects in the cluster (at least those named like tenants).
    owned: objects found with OWNED_SELECTOR, each with apiVersion, kind and metadata (the
      role reads OWNED_KINDS with that selector).
    nodes: the Node objects of the cluster: every GPU resource they advertise is capped in
      each tenant's quota (at 0 where the tenant does not list it).

    A tenant whose namespace exists without managed-by=kubegpu is an error unless the tenant says
    adopt_namespace: true; an adopted namespace is never deleted, and when its tenant goes, the
    labels kubegpu put on it are released (re-applied empty with kubegpu's field manager).
    Returns {manifests, namespaces, namespaced, new_namespaces, delete, release, adopted, errors};
    manifests is namespaces + namespaced in apply order; delete and release hold minimal
    manifests ({apiVersion, kind, metadata: {name[, namespace]}}), deletion in a safe order.
    """
    existing = {}
    for ns in namespaces or []:
        meta = ns.get("metadata") or {}
        existing[meta.get("name")] = ns
    errors = []
    adopted = []
    for index, tenant in enumerate(settings["tenants"]):
        ns = existing.get(tenant["name"])
        if (
            ns is None
            or (ns.get("metadata") or {}).get("labels", {}).get(MANAGED_BY_LABEL) == MANAGED_BY
        ):
            continue
        if tenant["adopt_namespace"]:
            adopted.append(tenant["name"])
        else:
            errors.append(
                "%stenants[%d] (%s): namespace %r exists and kubegpu did not create it (no "
                "%s=%s label); set adopt_namespace: true on the tenant to manage its quota, "
                "limits, RBAC and network policies there (kubegpu will never delete it), or "
                "choose another name"
                % (PREFIX, index, tenant["name"], tenant["name"], MANAGED_BY_LABEL, MANAGED_BY)
            )
    manifests = render_tenants(settings, adopted, advertised_gpu_resources(nodes))
    wanted = set(_ref_key(object_ref(m)) for m in manifests)
    tenant_names = set(t["name"] for t in settings["tenants"])
    delete, release = [], []
    order = dict((kind, i) for i, (_, kind) in enumerate(OWNED_KINDS))
    for obj in owned or []:
        if not is_owned(obj):
            continue  # a selector the server ignored, or a hand-made object: never ours
        ref = object_ref(obj)
        if ref["kind"] not in order:
            continue
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            continue  # already being deleted (a namespace stays Terminating a while)
        if _ref_key(ref) in wanted:
            continue
        if ref["kind"] == "Namespace":
            if ref["name"] in tenant_names:
                continue  # adopted now, or still wanted: never delete a tenant's namespace
            if not settings["prune_namespaces"]:
                continue
        delete.append(ref)
    delete.sort(key=lambda r: (order[r["kind"]], r["namespace"], r["name"]))
    delete = [_deletable(r) for r in delete]
    # Adopted namespaces of tenants that are gone: hand their labels back.
    for name, ns in sorted(existing.items()):
        labels = (ns.get("metadata") or {}).get("labels") or {}
        if name in tenant_names or not labels.get(TENANT_LABEL):
            continue
        if labels.get(MANAGED_BY_LABEL) == MANAGED_BY:
            continue
        if _was_applied_by(ns, settings["field_manager"]):
            release.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    if errors:
        manifests, delete, release = [], [], []
    return {
        "manifests": manifests,
        # The same objects in two steps: namespaces, then what lives in them. In check mode the
        # objects of namespaces that do not exist yet cannot be dry-run (the server answers
        # NotFound), so the role only reports them.
        "namespaces": [m for m in manifests if m["kind"] == "Namespace"],
        "namespaced": [m for m in manifests if m["kind"] != "Namespace"],
        "new_namespaces": sorted(
            t["name"] for t in settings["tenants"] if t["name"] not in existing
        ),
        "delete": delete,
        "release": release,
        "adopted": adopted,
        "errors": errors,
    }


def _deletable(ref):
    """A reference as the minimal manifest kubernetes.core.k8s deletes by."""
    meta = {"name": ref["name"]}
    if ref["namespace"]:
        meta["namespace"] = ref["namespace"]
    return {"apiVersion": ref["apiVersion"], "kind": ref["kind"], "metadata": meta}


def _was_applied_by(obj, manager):
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            return True
    return False
