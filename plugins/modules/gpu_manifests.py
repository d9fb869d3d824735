#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_manifests
short_description: Plan the GPU cluster layer - validated manifests, node patches, and what to delete
version_added: "0.1.0"
description:
  - Validates the settings of role C(kubegpu.gpu.gpu_cluster), reads what the cluster already
    has, and returns the objects to apply (NVIDIA device plugin with its config, GPU Feature
    Discovery, RuntimeClass, DCGM exporter, quotas), the JSON patches that give nodes their
    labels and taints, and the objects kubegpu created earlier that are no longer wanted.
  - Only reads from the API. The role applies the result with C(kubernetes.core.k8s)
    (server-side apply) and C(kubernetes.core.k8s_json_patch).
  - "Validation happens before any connection: every problem is reported at once, each naming
    the role variable (for example C(gpu_cluster_sharing.replicas)), what was found and what is
    allowed."
  - Then the kubeconfig must exist and its server must answer C(/version) within O(timeout)
    seconds.
  - "What the cluster decides: a ServiceMonitor only when the C(monitoring.coreos.com/v1) API
    serves C(servicemonitors); the namespace is created only when it does not exist (or was
    created by kubegpu); a RuntimeClass of the same name that kubegpu did not create is left
    alone; any other object of the same name that kubegpu did not create is an error unless
    O(config.adopt_existing) is true."
  - With O(state=absent), lists every object that carries the labels
    C(app.kubernetes.io/managed-by=kubegpu) and C(app.kubernetes.io/part-of=kubegpu), and the
    node patches that remove the labels and taints kubegpu recorded on nodes.
options:
  config:
    description:
      - "The role's variables without their C(gpu_cluster_) prefix (for example
        C({mig_strategy: single, sharing: {strategy: time-slicing, replicas: 4}})). Missing
        keys take the role's defaults; unknown keys are errors."
    type: dict
    default: {}
  state:
    description:
      - V(present) plans a deployment; V(absent) plans a reset.
    type: str
    choices: [present, absent]
    default: present
extends_documentation_fragment:
  - kubegpu.gpu.cluster_api
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module only reads, so check mode returns the same plan.
  diff_mode:
    support: N/A
    details: Nothing is changed here; the tasks that apply the plan show diffs.
  platform:
    platforms: posix
requirements:
  - kubernetes (Python library) on the controller
notes:
  - The objects are data files of the collection (C(plugins/module_utils/data/cluster/)). The
    action plugin of the same name reads them on the controller and passes them to the module,
    so the task runs only as part of the collection, not as a bare module.
  - GPU Feature Discovery publishes its labels through node-feature-discovery's (NFD)
    NodeFeature API. With O(config.nfd=deploy) kubegpu deploys NFD (its CRDs, nfd-master,
    nfd-worker, nfd-gc) unless an NFD it did not create already serves that API, which is then
    used; O(config.nfd=existing) requires one; with O(config.nfd=none) GFD writes a
    features.d file for an NFD worker to read.
  - kubegpu's NFD CRDs are deleted (by prune or reset) only while no object that others
    made uses them (a NodeFeatureRule, NodeFeatureGroup, or a NodeFeature not kept by GFD or
    kubegpu's nfd-worker); otherwise they stay and are listed in RV(kept).
seealso:
  - module: kubegpu.gpu.gpu_cluster_readiness
author:
  - kubegpu maintainers
"""

EXAMPLES = r"""
- name: Plan the cluster layer with time-slicing
  kubegpu.gpu.gpu_manifests:
    kubeconfig: /etc/kubernetes/admin.conf
    config:
      sharing:
        strategy: time-slicing
        replicas: 4
  register: plan

- name: Apply what was planned
  kubernetes.core.k8s:
    kubeconfig: /etc/kubernetes/admin.conf
    definition: "{{ item }}"
    apply: true
    server_side_apply:
      field_manager: kubegpu
  loop: "{{ plan.manifests }}"

- name: Plan a reset
  kubegpu.gpu.gpu_manifests:
    kubeconfig: /etc/kubernetes/admin.conf
    state: absent
  register: reset_plan
"""

RETURN = r"""
manifests:
  description: Objects to apply, in order (state=present).
  returned: success
  type: list
  elements: dict
node_patches:
  description: JSON patches for nodes, one entry per node that needs one.
  returned: success
  type: list
  elements: dict
  contains:
    name:
      description: Node name.
      type: str
    patch:
      description: JSON patch operations.
      type: list
  sample: [{"name": "gpu-1", "patch": [{"op": "add", "path": "/metadata/labels/example.com~1pool", "value": "a"}]}]
apply:
  description: >-
    The manifests this run applies, in order, as one list for one kubernetes.core.k8s call:
    all of them, except in check mode while gpu_cluster_namespace does not exist yet, when
    the objects inside it are left out (they cannot be dry-run before their namespace exists;
    see deferred).
  returned: success
  type: list
  elements: dict
deferred:
  description: How many manifests apply leaves out (check mode, namespace not there yet).
  returned: success
  type: int
delete:
  description: >-
    Objects kubegpu created to delete, in order: with state=absent all of them; with
    state=present those no longer rendered (pruned; namespaces are never pruned).
  returned: success
  type: list
  elements: dict
  sample: [{"apiVersion": "apps/v1", "kind": "DaemonSet", "namespace": "kube-system", "name": "dcgm-exporter"}]
delete_definitions:
  description: >-
    The same objects as delete, in the same order, as minimal definitions (apiVersion, kind,
    metadata name and namespace) for one kubernetes.core.k8s call with state=absent.
  returned: success
  type: list
  elements: dict
missing_nodes:
  description: Nodes named in gpu_cluster_node_labels/node_taints that have not joined the cluster.
  returned: success
  type: list
  elements: str
kept:
  description: Objects of the same name that kubegpu did not create and leaves as they are.
  returned: success
  type: list
  elements: str
  sample: ["RuntimeClass nvidia"]
server_version:
  description: gitVersion of the API server.
  returned: success
  type: str
  sample: v1.33.1
service_monitor_api:
  description: Whether monitoring.coreos.com/v1 ServiceMonitor is served.
  returned: success
  type: bool
namespace_missing:
  description: >-
    Whether gpu_cluster_namespace does not exist yet (it is among the manifests; in check mode
    the objects inside it cannot be dry-run before it exists).
  returned: success
  type: bool
errors:
  description: Every validation error (on failure).
  returned: failure
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.kubegpu.gpu.plugins.module_utils.cluster_api import (
    API_ARGUMENT_SPEC,
    HAS_KUBERNETES,
    KUBERNETES_IMPORT_ERROR,
    ClusterApi,
    ClusterApiError,
    object_path,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.cluster_manifests import (
    NFD_API_VERSION,
    NFD_CRDS,
    NFD_NODEFEATURE_CRD,
    NFD_WORKER_NAME,
    OWNED_SELECTOR,
    is_owned,
    object_ref,
    render_manifests,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.cluster_nodes import (
    node_patch,
    node_reset_patch,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.cluster_settings import (
    DRA_KUBERNETES,
    validate_config,
)

# Deletion order: dependents first, the namespace last.
DELETE_ORDER = (
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("v1", "Service"),
    ("apps/v1", "DaemonSet"),
    ("apps/v1", "Deployment"),
    ("v1", "Pod"),
    ("v1", "ConfigMap"),
    ("v1", "ResourceQuota"),
    ("v1", "LimitRange"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("v1", "ServiceAccount"),
    ("node.k8s.io/v1", "RuntimeClass"),
    ("resource.k8s.io/v1", "DeviceClass"),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
    ("v1", "Namespace"),
)
CRD = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
# The DRA API gpu_cluster_allocation dra needs (its DeviceClasses), by group version and plural.
DRA_API = ("resource.k8s.io/v1", "deviceclasses")


def dra_api_problem(config, dra_api, version):
    """Why gpu_cluster_allocation dra cannot be applied to this API server, or None."""
    if config["allocation"] != "dra" or dra_api:
        return None
    return (
        "gpu_cluster_allocation: dra needs the API server to serve resource.k8s.io/v1 "
        "(DeviceClass, ResourceClaim, ResourceSlice), which Kubernetes %s and later serve; "
        "this API server is %s: upgrade the control plane or set gpu_cluster_allocation: "
        "device-plugin"
        % (DRA_KUBERNETES, (version or {}).get("gitVersion") or "of unknown version")
    )


def _ref_key(ref):
    return (ref["apiVersion"], ref["kind"], ref.get("namespace") or "", ref["name"])


def owned_objects(api, service_monitor_api, crd_api=True):
    """Every object with kubegpu's labels, in deletion order (kinds the server serves), less
    those a controller owns: a DaemonSet's or Deployment's pods carry their template's labels,
    and Kubernetes' garbage collector deletes them with their owner. Deleting them too would
    race it (a pod read just before the collector deletes it is gone when the delete comes:
    404)."""
    dra_api = api.has_resource(*DRA_API)
    found = []
    for api_version, kind in DELETE_ORDER:
        if kind == "ServiceMonitor" and not service_monitor_api:
            continue
        if kind == "DeviceClass" and not dra_api:
            continue
        if (api_version, kind) == CRD and not crd_api:
            continue
        for obj in api.list(object_path(api_version, kind), OWNED_SELECTOR):
            meta = obj.get("metadata") or {}
            if any(ref.get("controller") for ref in meta.get("ownerReferences") or []):
                continue
            found.append(
                {
                    "apiVersion": api_version,
                    "kind": kind,
                    "name": meta.get("name"),
                    "namespace": meta.get("namespace"),
                }
            )
    return found


def _is_kubegpu_node_feature(obj, namespaces):
    """A NodeFeature that kubegpu's own agents keep: GFD's nvidia-features-for-<node>, or
    nfd-worker's (owned by kubegpu's nfd-worker DaemonSet), in a namespace of kubegpu's."""
    meta = obj.get("metadata") or {}
    if meta.get("namespace") not in namespaces:
        return False
    if (meta.get("name") or "").startswith("nvidia-features-for-"):
        return True
    return any(
        ref.get("kind") == "DaemonSet" and ref.get("name") == NFD_WORKER_NAME
        for ref in meta.get("ownerReferences") or []
    )


def guard_crds(api, delete, owned):
    """(delete, kept): kubegpu's NFD CRDs stay where objects that others made still use them.

    Deleting a CRD deletes every object of its kind in the cluster: a NodeFeatureRule or
    NodeFeatureGroup (kubegpu makes none), or a NodeFeature that is not GFD's or kubegpu's
    nfd-worker's, keeps its CRD, named in `kept` with the reason."""
    namespaces = set(ref["namespace"] for ref in owned if ref.get("namespace"))
    kinds = dict((name, kind) for kind, name in NFD_CRDS.items())
    out, kept = [], []
    for ref in delete:
        kind = kinds.get(ref["name"]) if (ref["apiVersion"], ref["kind"]) == CRD else None
        if kind is None:
            out.append(ref)
            continue
        others = [
            obj
            for obj in api.list(object_path(NFD_API_VERSION, kind))
            if kind != "NodeFeature" or not _is_kubegpu_node_feature(obj, namespaces)
        ]
        if others:
            kept.append(
                "CustomResourceDefinition %s (kubegpu's, kept: %d %s object(s) that kubegpu "
                "did not make use it, e.g. %s)"
                % (
                    ref["name"],
                    len(others),
                    kind,
                    "/".join(
                        x
                        for x in (
                            others[0]["metadata"].get("namespace"),
                            others[0]["metadata"].get("name"),
                        )
                        if x
                    ),
                )
            )
        else:
            out.append(ref)
    return out, kept


def foreign_device_plugins(api):
    """Other DaemonSets that run the NVIDIA device plugin (two plugins fight over the GPUs)."""
    found = []
    for ds in api.list(object_path("apps/v1", "DaemonSet")):
        if is_owned(ds):
            continue
        spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
        for container in spec.get("containers") or []:
            image = container.get("image") or ""
            command = " ".join(container.get("command") or [])
            if (
                "k8s-device-plugin" in image
                and "gpu-feature-discovery" not in command
                and "config-manager" not in command
                and "mps-control-daemon" not in command
            ):
                meta = ds.get("metadata") or {}
                found.append("%s/%s" % (meta.get("namespace"), meta.get("name")))
                break
    return found


def plan_present(module, api, config, templates, service_monitor_api, crd_api=True):
    namespace = config["namespace"]
    ns_obj = api.get(object_path("v1", "Namespace", namespace), missing_ok=True)
    caps = {
        "service_monitor": service_monitor_api,
        "create_namespace": ns_obj is None or is_owned(ns_obj),
        "manage_runtime_class": True,
    }
    kept = []
    if config["runtime_class_enabled"]:
        rc = api.get(
            object_path("node.k8s.io/v1", "RuntimeClass", config["runtime_class_name"]),
            missing_ok=True,
        )
        if rc is not None and not is_owned(rc) and not config["adopt_existing"]:
            caps["manage_runtime_class"] = False
            kept.append("RuntimeClass %s" % config["runtime_class_name"])
            if rc.get("handler") != config["runtime_class_handler"]:
                module.warn(
                    "RuntimeClass %s exists (not created by kubegpu) with handler %r, "
                    "not %r: pods using it run with that handler"
                    % (
                        config["runtime_class_name"],
                        rc.get("handler"),
                        config["runtime_class_handler"],
                    )
                )
    # node-feature-discovery: one that kubegpu did not create (its NodeFeature CRD without
    # kubegpu's labels) is used, never deployed a second time nor adopted.
    nfd_crd = (
        api.get(object_path(CRD[0], CRD[1], NFD_NODEFEATURE_CRD), missing_ok=True)
        if crd_api
        else None
    )
    foreign_nfd = nfd_crd is not None and not is_owned(nfd_crd)
    if config["nfd"] == "deploy" and config["gfd_enabled"] and not crd_api:
        # Every Kubernetes API server serves apiextensions.k8s.io/v1; a reduced one (a test
        # double) cannot hold NFD's CRDs.
        module.warn(
            "the API server serves no apiextensions.k8s.io/v1 CustomResourceDefinitions: "
            "node-feature-discovery is not deployed, and GFD's labels reach no node"
        )
    if config["nfd"] == "existing" and nfd_crd is None:
        module.fail_json(
            msg="gpu_cluster_nfd: 'existing', but the cluster serves no NodeFeature API "
            "(CustomResourceDefinition %s is missing): install node-feature-discovery first, "
            "or set gpu_cluster_nfd: deploy (kubegpu deploys it) or none" % NFD_NODEFEATURE_CRD,
            errors=[],
        )
    caps["deploy_nfd"] = config["nfd"] == "deploy" and not foreign_nfd and crd_api
    if config["nfd"] == "deploy" and foreign_nfd:
        kept.append(
            "node-feature-discovery (CustomResourceDefinition %s exists, not created by "
            "kubegpu): used instead of deploying a second one" % NFD_NODEFEATURE_CRD
        )
    manifests = render_manifests(config, templates, caps)

    missing_ns = []
    for quota in config["quotas"]:
        if quota["namespace"] == namespace and caps["create_namespace"]:
            continue
        if api.get(object_path("v1", "Namespace", quota["namespace"]), missing_ok=True) is None:
            missing_ns.append(quota["namespace"])
    if missing_ns:
        module.fail_json(
            msg="gpu_cluster_quotas: namespace(s) %s do not exist; create them "
            "first (kubegpu does not create namespaces for quotas)" % ", ".join(sorted(missing_ns)),
            errors=[],
        )

    conflicts = []
    for manifest in manifests:
        if manifest["kind"] == "Namespace":
            continue
        ref = object_ref(manifest)
        existing = api.get(
            object_path(ref["apiVersion"], ref["kind"], ref["name"], ref["namespace"]),
            missing_ok=True,
        )
        if existing is not None and not is_owned(existing) and not config["adopt_existing"]:
            where = ref["namespace"] + "/" if ref["namespace"] else ""
            conflicts.append("%s %s%s" % (ref["kind"], where, ref["name"]))
    if conflicts:
        module.fail_json(
            msg="these objects exist and were not created by kubegpu (they lack the label "
            "app.kubernetes.io/managed-by=kubegpu): %s. Remove them (for example the Helm "
            "release or GPU operator that made them), choose another gpu_cluster_namespace, "
            "or set gpu_cluster_adopt_existing: true to take them over" % "; ".join(conflicts),
            errors=[],
        )

    others = foreign_device_plugins(api)
    if others and config["device_plugin_enabled"]:
        module.warn(
            "another NVIDIA device plugin DaemonSet runs in this cluster (%s); two plugins "
            "advertise the same GPUs to the kubelet. Remove one of them." % ", ".join(others)
        )

    rendered = set(_ref_key(object_ref(m)) for m in manifests)
    owned = owned_objects(api, service_monitor_api, crd_api)
    prune = [
        ref
        for ref in owned
        if ref["kind"] not in ("Namespace", "Pod") and _ref_key(ref) not in rendered
    ]
    prune, kept_crds = guard_crds(api, prune, owned)
    kept.extend(kept_crds)

    patches, missing_nodes = [], []
    for name in sorted(set(config["node_labels"]) | set(config["node_taints"])):
        node = api.get(object_path("v1", "Node", name), missing_ok=True)
        if node is None:
            missing_nodes.append(name)
            continue
        ops = node_patch(
            node, config["node_labels"].get(name) or {}, config["node_taints"].get(name) or []
        )
        if ops:
            patches.append({"name": name, "patch": ops})
    if missing_nodes:
        module.warn(
            "node(s) %s have not joined the cluster; their labels and taints are applied "
            "on a later run (or set by the kubelet at registration)" % ", ".join(missing_nodes)
        )
    return {
        "manifests": manifests,
        "node_patches": patches,
        "delete": prune,
        "missing_nodes": missing_nodes,
        "kept": kept,
        "namespace_missing": ns_obj is None,
    }


def plan_absent(api, service_monitor_api, crd_api=True):
    patches = []
    for node in api.list(object_path("v1", "Node")):
        ops = node_reset_patch(node)
        if ops:
            patches.append({"name": node["metadata"]["name"], "patch": ops})
    owned = owned_objects(api, service_monitor_api, crd_api)
    delete, kept = guard_crds(api, owned, owned)
    return {
        "manifests": [],
        "node_patches": patches,
        "delete": delete,
        "missing_nodes": [],
        "kept": kept,
        "namespace_missing": False,
    }


def run_lists(plan, namespace, check_mode):
    """What one kubernetes.core.k8s call applies and one deletes: the manifests (in check mode
    without those inside a namespace that is not there yet) and the objects to delete as
    minimal definitions, each in the plan's order."""
    apply = plan["manifests"]
    if check_mode and plan["namespace_missing"]:
        apply = [m for m in apply if m["metadata"].get("namespace") != namespace]
    delete = []
    for ref in plan["delete"]:
        metadata = {"name": ref["name"]}
        if ref.get("namespace"):
            metadata["namespace"] = ref["namespace"]
        delete.append({"apiVersion": ref["apiVersion"], "kind": ref["kind"], "metadata": metadata})
    return {
        "apply": apply,
        "deferred": len(plan["manifests"]) - len(apply),
        "delete_definitions": delete,
    }


def main():
    module = AnsibleModule(
        argument_spec=dict(
            **API_ARGUMENT_SPEC,
            config=dict(type="dict", default={}),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            # Internal, not a user option: the objects' templates (the YAML files of
            # module_utils/data/cluster/, which AnsiballZ does not ship), read on the
            # controller and passed here by the action plugin of the same name.
            _object_templates=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    config, errors = validate_config(params["config"])
    if errors and params["state"] == "present":
        module.fail_json(
            msg="invalid gpu_cluster settings:\n- " + "\n- ".join(errors), errors=errors
        )
    if not HAS_KUBERNETES:
        module.fail_json(
            msg=missing_required_lib("kubernetes"), exception=str(KUBERNETES_IMPORT_ERROR)
        )
    templates = params["_object_templates"]
    if params["state"] == "present" and not templates:
        module.fail_json(
            msg="_object_templates is missing: kubegpu.gpu.gpu_manifests runs through its action "
            "plugin, which passes the object templates from the collection on the controller; "
            "run it as that task, not as a bare module",
            errors=[],
        )
    if params["timeout"] < 1:
        module.fail_json(msg="timeout must be 1 second or more, got %d" % params["timeout"])
    try:
        api = ClusterApi(params["kubeconfig"], params["context"], params["timeout"])
        version = api.version()
    except ClusterApiError as exc:
        # The role passes kubegpu_kubeconfig here; name it, so the message says what to fix.
        module.fail_json(
            msg="kubegpu_kubeconfig (option kubeconfig): %s" % exc, errors=[], status=exc.status
        )
    try:
        service_monitor_api = api.has_resource("monitoring.coreos.com/v1", "servicemonitors")
        crd_api = api.has_resource("apiextensions.k8s.io/v1", "customresourcedefinitions")
        if params["state"] == "present" and config["allocation"] == "dra":
            problem = dra_api_problem(config, api.has_resource(*DRA_API), version)
            if problem:
                module.fail_json(msg=problem, errors=[])
        if params["state"] == "present":
            plan = plan_present(module, api, config, templates, service_monitor_api, crd_api)
        else:
            plan = plan_absent(api, service_monitor_api, crd_api)
    except ClusterApiError as exc:
        module.fail_json(msg=str(exc), errors=[], status=exc.status)
    finally:
        api.close()
    plan.update(run_lists(plan, config.get("namespace"), module.check_mode))
    module.exit_json(
        changed=False,
        server_version=version.get("gitVersion"),
        service_monitor_api=service_monitor_api,
        **plan,
    )


if __name__ == "__main__":
    main()
