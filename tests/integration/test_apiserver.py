"""The test Kubernetes API server (tests/apiserver) behaves like a real one where kubegpu relies on it.

Each test uses its own namespace or node names, so they share one server per session. The
server is real upstream API machinery over a real etcd; there are no controllers or kubelets, so
tests play them by writing status, as named where they do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.kubegpu.gpu.plugins.module_utils.cluster_api import send
from kubernetes import client, dynamic, watch
from kubernetes.client.rest import ApiException

pytestmark = pytest.mark.apiserver

GPU = "nvidia.com/gpu"


def message(err: ApiException) -> str:
    """The Status message of a failed request."""
    return str(json.loads(err.body)["message"])


def call(
    api: client.ApiClient,
    path: str,
    method: str,
    body: Any = None,
    content_type: str = "application/json",
) -> Any:
    """The JSON answer to one raw request, through the product's send() (either shape of
    ApiClient.call_api)."""
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type
    data = send(api, method, path, (), headers, body).decode()
    return json.loads(data) if data else None


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def api(kube_apiserver: Any) -> client.ApiClient:
    return kube_apiserver.client()


@pytest.fixture
def namespace(api: client.ApiClient) -> Iterator[str]:
    name = unique("t")
    client.CoreV1Api(api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
    )
    yield name
    client.CoreV1Api(api).delete_namespace(name)


def gpu_node(name: str, gpus: str = "4", taints: list[dict[str, str]] | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"taints": taints or []},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", GPU: gpus},
            "allocatable": {"cpu": "8", "memory": "31Gi", GPU: gpus},
        },
    }


def daemonset(name: str, containers: list[dict]) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": containers},
            },
        },
    }


# --------------------------------------------------------------------------- basics


def test_version_and_discovery_list_every_served_kind(
    kube_apiserver: Any, api: client.ApiClient
) -> None:
    info = client.VersionApi(api).get_code()  # the client asks for /version/ (trailing slash)
    assert info.git_version == kube_apiserver.version  # set through -ldflags from the packages
    assert info.major == "1" and info.git_version.startswith(f"v1.{info.minor}.")
    served = set()
    for resource in client.CoreV1Api(api).get_api_resources().resources:
        served.add(("v1", resource.name))
    for group in client.ApisApi(api).get_api_versions().groups:
        gv = group.preferred_version.group_version
        for resource in call(api, f"/apis/{gv}", "GET")["resources"]:
            served.add((gv, resource["name"]))
    expected = {
        ("v1", r)
        for r in [
            "namespaces",
            "namespaces/status",
            "nodes",
            "nodes/status",
            "pods",
            "pods/status",
            "pods/eviction",
            "pods/binding",
            "pods/log",
            "configmaps",
            "secrets",
            "services",
            "services/status",
            "serviceaccounts",
            "events",
            "resourcequotas",
            "resourcequotas/status",
            "limitranges",
        ]
    } | {
        ("apps/v1", "daemonsets"),
        ("apps/v1", "daemonsets/status"),
        ("apps/v1", "deployments"),
        ("apps/v1", "deployments/status"),
        ("batch/v1", "jobs"),
        ("batch/v1", "jobs/status"),
        ("coordination.k8s.io/v1", "leases"),
        ("networking.k8s.io/v1", "networkpolicies"),
        ("node.k8s.io/v1", "runtimeclasses"),
        ("policy/v1", "poddisruptionbudgets"),
        ("policy/v1", "poddisruptionbudgets/status"),
        ("rbac.authorization.k8s.io/v1", "roles"),
        ("rbac.authorization.k8s.io/v1", "rolebindings"),
        ("rbac.authorization.k8s.io/v1", "clusterroles"),
        ("rbac.authorization.k8s.io/v1", "clusterrolebindings"),
        ("scheduling.k8s.io/v1", "priorityclasses"),
    }
    assert served == expected


def test_openapi_carries_patch_strategies(api: client.ApiClient) -> None:
    v2 = call(api, "/openapi/v2", "GET")
    containers = v2["definitions"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
    assert containers["x-kubernetes-patch-strategy"] == "merge"
    assert containers["x-kubernetes-patch-merge-key"] == "name"
    node = v2["definitions"]["io.k8s.api.core.v1.Node"]
    assert {"group": "", "version": "v1", "kind": "Node"} in node["x-kubernetes-group-version-kind"]
    v3 = call(api, "/openapi/v3/apis/apps/v1", "GET")
    assert "io.k8s.api.apps.v1.DaemonSet" in v3["components"]["schemas"]


def test_namespace_create_get_list_watch(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    start = core.list_namespace().metadata.resource_version
    events: list[tuple[str, str]] = []
    name = unique("watched")

    def watcher() -> None:
        w = watch.Watch()
        for event in w.stream(core.list_namespace, resource_version=start, timeout_seconds=10):
            events.append((event["type"], event["object"].metadata.name))
            if event["object"].metadata.name == name and event["type"] == "DELETED":
                w.stop()

    thread = threading.Thread(target=watcher)
    thread.start()
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    got = core.read_namespace(name)
    assert got.status.phase == "Active"
    assert got.metadata.labels["kubernetes.io/metadata.name"] == name
    assert name in [ns.metadata.name for ns in core.list_namespace().items]
    assert [sa.metadata.name for sa in core.list_namespaced_service_account(name).items] == [
        "default"
    ]
    core.delete_namespace(name)
    thread.join(timeout=15)
    assert ("ADDED", name) in events and ("DELETED", name) in events
    with pytest.raises(ApiException) as missing:
        core.read_namespace(name)
    assert missing.value.status == 404


def test_creating_in_a_missing_namespace_is_refused(api: client.ApiClient) -> None:
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(api).create_namespaced_config_map(
            "no-such-namespace", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="x"))
        )
    assert err.value.status == 404
    assert message(err.value) == 'namespaces "no-such-namespace" not found'


def test_system_namespaces_and_priority_classes_exist(api: client.ApiClient) -> None:
    names = {ns.metadata.name for ns in client.CoreV1Api(api).list_namespace().items}
    assert {"default", "kube-system", "kube-public", "kube-node-lease"} <= names
    classes = {
        pc.metadata.name: pc.value for pc in client.SchedulingV1Api(api).list_priority_class().items
    }
    assert classes["system-node-critical"] > classes["system-cluster-critical"] > 10**9


# --------------------------------------------------------------------------- nodes and status


def test_node_capacity_changes_only_through_status(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    name = unique("gpu-node")
    created = core.create_node(gpu_node(name, gpus="4"))
    assert created.status.capacity[GPU] == "4"  # a kubelet registers with its status
    generation = created.metadata.generation

    # Through the main resource, status is silently ignored (metadata still changes).
    patched = core.patch_node(
        name, {"metadata": {"labels": {"a": "b"}}, "status": {"capacity": {GPU: "8"}}}
    )
    assert patched.status.capacity[GPU] == "4"
    assert patched.metadata.labels["a"] == "b"
    assert patched.metadata.generation == generation

    # Through /status it changes, and /status ignores spec.
    patched = core.patch_node_status(
        name,
        {
            "spec": {"unschedulable": True},
            "status": {"capacity": {GPU: "8"}, "allocatable": {GPU: "7"}},
        },
    )
    assert patched.status.capacity[GPU] == "8"
    assert patched.status.allocatable[GPU] == "7"
    assert not patched.spec.unschedulable
    assert patched.metadata.generation == generation

    # A spec change through the main resource bumps the generation.
    cordoned = core.patch_node(name, {"spec": {"unschedulable": True}})
    assert cordoned.spec.unschedulable is True
    assert cordoned.metadata.generation == generation + 1
    core.delete_node(name)


def test_quantities_are_strings_and_extended_resources_must_be_whole(
    api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    name = unique("qty")
    core.create_node(gpu_node(name, gpus="4"))
    raw = call(api, f"/api/v1/nodes/{name}", "GET")
    assert raw["status"]["capacity"][GPU] == "4"  # JSON string, as the client must send it
    # The server, like upstream, also takes a JSON number and answers with the canonical string;
    # it is the Python client's typed models (37.x) that refuse integers, before sending anything.
    call(
        api,
        f"/api/v1/nodes/{name}/status",
        "PATCH",
        body={"status": {"capacity": {GPU: 8}}},
        content_type="application/merge-patch+json",
    )
    assert core.read_node(name).status.capacity[GPU] == "8"
    core.delete_node(name)

    def pod(requests: dict[str, str], limits: dict[str, str]) -> dict:
        return {
            "metadata": {"name": unique("p")},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "busybox:1.36",
                        "resources": {"requests": requests, "limits": limits},
                    }
                ]
            },
        }

    for requests, limits, expected in [
        ({GPU: "1"}, {}, "Limit must be set for non overcommitable resources"),
        ({GPU: "1"}, {GPU: "2"}, "must be equal to nvidia.com/gpu limit"),
        ({}, {GPU: "500m"}, "must be an integer"),
    ]:
        with pytest.raises(ApiException) as err:
            core.create_namespaced_pod(namespace, pod(requests, limits))
        assert err.value.status == 422 and expected in message(err.value), err.value.body
    created = core.create_namespaced_pod(namespace, pod({}, {GPU: "2"}))
    # As upstream's defaulting: the request follows the limit.
    assert created.spec.containers[0].resources.requests == {GPU: "2"}
    assert created.status.phase == "Pending"


def test_json_patch_of_taints_appends_while_a_merge_patch_replaces_the_list(
    api: client.ApiClient,
) -> None:
    core = client.CoreV1Api(api)
    name = unique("tainted")
    existing = {"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"}
    core.create_node(gpu_node(name, taints=[existing]))
    gpu_taint = {"key": GPU, "value": "present", "effect": "NoSchedule"}

    appended = core.patch_node(name, [{"op": "add", "path": "/spec/taints/-", "value": gpu_taint}])
    assert [t.key for t in appended.spec.taints] == [existing["key"], GPU]

    # taints carry no patch strategy: a strategic merge patch replaces the whole list.
    replaced = core.patch_node(name, {"spec": {"taints": [gpu_taint]}})
    assert [t.key for t in replaced.spec.taints] == [GPU]

    with pytest.raises(ApiException) as err:
        core.patch_node(
            name,
            [
                {
                    "op": "add",
                    "path": "/spec/taints/-",
                    "value": {"key": "bad key", "effect": "Sometimes"},
                }
            ],
        )
    assert err.value.status == 422
    assert "spec.taints[1].key" in message(err.value) and "spec.taints[1].effect" in message(
        err.value
    )
    core.delete_node(name)


# --------------------------------------------------------------------------- patches and apply


def test_strategic_merge_patch_of_a_daemonset(api: client.ApiClient, namespace: str) -> None:
    apps = client.AppsV1Api(api)
    name = unique("plugin")
    created = apps.create_namespaced_daemon_set(
        namespace,
        daemonset(
            name,
            [
                {
                    "name": "plugin",
                    "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
                    "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}],
                },
            ],
        ),
    )
    assert created.metadata.generation == 1
    assert created.spec.update_strategy.rolling_update.max_unavailable == 1  # defaulted

    # Containers merge by name: one changes image, one is added, env merges by name.
    patched = apps.patch_namespaced_daemon_set(
        name,
        namespace,
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "plugin",
                                "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
                                "env": [
                                    {"name": "DEVICE_LIST_STRATEGY", "value": "cdi-annotations"}
                                ],
                            },
                            {"name": "gfd", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"},
                        ]
                    }
                }
            }
        },
    )
    containers = {c.name: c for c in patched.spec.template.spec.containers}
    assert set(containers) == {"plugin", "gfd"}
    assert containers["plugin"].image.endswith(":v0.20.0")
    assert {e.name for e in containers["plugin"].env} == {
        "FAIL_ON_INIT_ERROR",
        "DEVICE_LIST_STRATEGY",
    }
    assert patched.metadata.generation == 2

    # $patch: delete removes one element of a merged list.
    patched = apps.patch_namespaced_daemon_set(
        name,
        namespace,
        {"spec": {"template": {"spec": {"containers": [{"name": "gfd", "$patch": "delete"}]}}}},
    )
    assert [c.name for c in patched.spec.template.spec.containers] == ["plugin"]

    # Status is written by the (absent) controller through /status only.
    status = {
        "status": {
            "desiredNumberScheduled": 3,
            "numberReady": 2,
            "currentNumberScheduled": 3,
            "numberMisscheduled": 0,
            "observedGeneration": 3,
        }
    }
    ignored = apps.patch_namespaced_daemon_set(name, namespace, status)
    assert ignored.status.desired_number_scheduled in (None, 0)
    played = apps.patch_namespaced_daemon_set_status(name, namespace, status)
    assert (played.status.number_ready, played.metadata.generation) == (2, 3)

    with pytest.raises(ApiException) as err:
        apps.patch_namespaced_daemon_set(
            name, namespace, {"spec": {"selector": {"matchLabels": {"app": "other"}}}}
        )
    assert err.value.status == 422 and "field is immutable" in message(err.value)


def test_server_side_apply_twice_changes_nothing_the_second_time(
    api: client.ApiClient, namespace: str
) -> None:
    resources = dynamic.DynamicClient(api).resources
    ds_api = resources.get(api_version="apps/v1", kind="DaemonSet")
    body = daemonset(
        "nvidia-device-plugin",
        [
            {
                "name": "plugin",
                "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
                "resources": {"limits": {"memory": "64Mi"}},
            },
        ],
    )
    body["metadata"]["namespace"] = namespace
    first = ds_api.server_side_apply(body=body, field_manager="kubegpu-test")
    second = ds_api.server_side_apply(body=body, field_manager="kubegpu-test")
    assert second.metadata.resourceVersion == first.metadata.resourceVersion
    managers = {m.manager: m.operation for m in second.metadata.managedFields}
    assert managers == {"kubegpu-test": "Apply"}

    # Another manager taking a field it does not own conflicts unless forced.
    body["spec"]["template"]["spec"]["containers"][0]["image"] = "example.com/plugin:v1"
    with pytest.raises(Exception) as err:
        ds_api.server_side_apply(body=body, field_manager="someone-else")
    assert getattr(err.value, "status", None) == 409
    forced = ds_api.server_side_apply(body=body, field_manager="someone-else", force_conflicts=True)
    assert forced.spec.template.spec.containers[0].image == "example.com/plugin:v1"


def run_task(tmp_path: Path, module: str, args: dict, loop: list | None = None) -> dict:
    """Run one kubernetes.core task through ansible-playbook on localhost; its JSON result."""
    task: dict[str, Any] = {"name": f"Run {module}", module: args}
    if loop is not None:
        task["loop"] = loop
    play = {
        "name": "Talk to the test API server",
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "tasks": [task],
    }
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([play]))
    (tmp_path / "ansible.cfg").write_text("[defaults]\nretry_files_enabled = False\n")
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"),
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
    )
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(playbook)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return dict(json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"])


def test_kubernetes_core_k8s_apply_is_idempotent(
    kube_apiserver: Any, api: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    runtime_class = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": unique("nvidia")},
        "handler": "nvidia",
    }
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpu-quota", "namespace": namespace},
        "spec": {"hard": {f"requests.{GPU}": "4"}},
    }
    args = {
        "kubeconfig": str(kube_apiserver.kubeconfig),
        "apply": True,
        "server_side_apply": {"field_manager": "kubegpu"},
        "definition": "{{ item }}",
    }
    first = run_task(tmp_path, "kubernetes.core.k8s", args, [runtime_class, quota])["results"]
    second = run_task(tmp_path, "kubernetes.core.k8s", args, [runtime_class, quota])["results"]
    assert [r["changed"] for r in first] == [True, True]
    assert [r["changed"] for r in second] == [False, False]
    assert [r["result"]["metadata"]["resourceVersion"] for r in second] == [
        r["result"]["metadata"]["resourceVersion"] for r in first
    ]
    rc = client.NodeV1Api(api).read_runtime_class(runtime_class["metadata"]["name"])
    assert rc.handler == "nvidia"
    assert client.CoreV1Api(api).read_namespaced_resource_quota(
        "gpu-quota", namespace
    ).spec.hard == {f"requests.{GPU}": "4"}
    client.NodeV1Api(api).delete_runtime_class(runtime_class["metadata"]["name"])


def test_kubernetes_core_k8s_drain_cordons_and_evicts(
    kube_apiserver: Any, api: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    core, policy = client.CoreV1Api(api), client.PolicyV1Api(api)
    node = unique("drained")
    core.create_node(gpu_node(node))
    for name, owner in (("work", "ReplicaSet"), ("plugin", "DaemonSet")):
        core.create_namespaced_pod(
            namespace,
            {
                "metadata": {
                    "name": name,
                    "labels": {"app": name},
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": owner,
                            "name": name,
                            "uid": str(uuid.uuid4()),
                            "controller": True,
                        }
                    ],
                },
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "cuda:12"}]},
            },
        )
        core.patch_namespaced_pod_status(name, namespace, {"status": {"phase": "Running"}})
    policy.create_namespaced_pod_disruption_budget(
        namespace,
        {
            "metadata": {"name": "work"},
            "spec": {"minAvailable": 0, "selector": {"matchLabels": {"app": "work"}}},
        },
    )
    # Play the disruption controller.
    policy.patch_namespaced_pod_disruption_budget_status(
        "work", namespace, {"status": {"observedGeneration": 1, "disruptionsAllowed": 1}}
    )

    result = run_task(
        tmp_path,
        "kubernetes.core.k8s_drain",
        {
            "kubeconfig": str(kube_apiserver.kubeconfig),
            "name": node,
            "delete_options": {"ignore_daemonsets": True},
        },
    )
    assert result["changed"] is True
    assert core.read_node(node).spec.unschedulable is True
    assert core.read_namespaced_pod("work", namespace).metadata.deletion_timestamp is not None
    assert core.read_namespaced_pod("plugin", namespace).metadata.deletion_timestamp is None
    assert kube_apiserver.play_kubelet_finish_deletions(namespace) == [f"{namespace}/work"]
    assert [p.metadata.name for p in core.list_namespaced_pod(namespace).items] == ["plugin"]
    core.delete_node(node)


# --------------------------------------------------------------------------- selectors


def test_label_and_field_selectors(api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api)
    for name, node, labels in [
        ("a", "gpu-1", {"app": "smoke", "tier": "gpu"}),
        ("b", "gpu-2", {"app": "smoke", "tier": "cpu"}),
        ("c", "", {"app": "other"}),
    ]:
        spec: dict = {"containers": [{"name": "c", "image": "busybox:1.36"}]}
        if node:
            spec["nodeName"] = node
        core.create_namespaced_pod(
            namespace, {"metadata": {"name": name, "labels": labels}, "spec": spec}
        )

    def names(**kw: str) -> list[str]:
        return sorted(p.metadata.name for p in core.list_namespaced_pod(namespace, **kw).items)

    assert names(label_selector="app=smoke") == ["a", "b"]
    assert names(label_selector="app=smoke,tier in (gpu)") == ["a"]
    assert names(label_selector="tier,tier!=gpu") == ["b"]
    assert names(field_selector="spec.nodeName=gpu-2") == ["b"]
    assert names(field_selector="spec.nodeName=") == ["c"]
    assert names(field_selector="status.phase=Pending,metadata.name!=a") == ["b", "c"]
    all_ns = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=gpu-1")
    assert [(p.metadata.namespace, p.metadata.name) for p in all_ns.items] == [(namespace, "a")]
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod(namespace, field_selector="spec.hostname=x")
    assert err.value.status == 400 and "field label not supported" in message(err.value)


# --------------------------------------------------------------------------- eviction


def test_eviction_respects_the_disruption_budget(
    kube_apiserver: Any, api: client.ApiClient, namespace: str
) -> None:
    core, policy = client.CoreV1Api(api), client.PolicyV1Api(api)
    for name in ("w1", "w2"):
        core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": name, "labels": {"app": "gpu-work"}},
                "spec": {
                    "nodeName": "gpu-1",
                    "containers": [
                        {"name": "c", "image": "cuda:12", "resources": {"limits": {GPU: "1"}}}
                    ],
                },
            },
        )
        # Play the kubelet: the pods run.
        core.patch_namespaced_pod_status(name, namespace, {"status": {"phase": "Running"}})
    policy.create_namespaced_pod_disruption_budget(
        namespace,
        {
            "metadata": {"name": "gpu-work"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "gpu-work"}}},
        },
    )

    def evict(name: str) -> None:
        core.create_namespaced_pod_eviction(
            name,
            namespace,
            {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace},
            },
        )

    # No disruption controller has looked at the budget yet: upstream refuses with 429.
    with pytest.raises(ApiException) as err:
        evict("w1")
    assert err.value.status == 429

    # Play the disruption controller.
    policy.patch_namespaced_pod_disruption_budget_status(
        "gpu-work",
        namespace,
        {
            "status": {
                "observedGeneration": 1,
                "disruptionsAllowed": 1,
                "currentHealthy": 2,
                "desiredHealthy": 1,
                "expectedPods": 2,
            }
        },
    )
    evict("w1")
    evicted = core.read_namespaced_pod("w1", namespace)
    assert evicted.metadata.deletion_timestamp is not None  # bound to a node: graceful
    budget = policy.read_namespaced_pod_disruption_budget("gpu-work", namespace)
    assert budget.status.disruptions_allowed == 0
    assert list(budget.status.disrupted_pods) == ["w1"]

    with pytest.raises(ApiException) as err:
        evict("w2")
    assert err.value.status == 429
    status = json.loads(err.value.body)
    assert status["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert status["details"]["causes"][0] == {
        "reason": "DisruptionBudget",
        "message": "The disruption budget gpu-work needs 1 healthy pods and has 2 currently",
    }

    assert kube_apiserver.play_kubelet_finish_deletions(namespace) == [f"{namespace}/w1"]
    assert [p.metadata.name for p in core.list_namespaced_pod(namespace).items] == ["w2"]


def test_binding_and_log_subresources(api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {
                "name": "smoke",
                "annotations": {"apiserver.kubegpu.test/log": "GPU 0: Tesla T4\nok\n"},
            },
            "spec": {"restartPolicy": "Never", "containers": [{"name": "smi", "image": "cuda:12"}]},
        },
    )
    # Play the scheduler.
    call(
        api,
        f"/api/v1/namespaces/{namespace}/pods/smoke/binding",
        "POST",
        body={
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "smoke"},
            "target": {"kind": "Node", "name": "gpu-1"},
        },
    )
    pod = core.read_namespaced_pod("smoke", namespace)
    assert pod.spec.node_name == "gpu-1"
    with pytest.raises(ApiException) as err:
        call(
            api,
            f"/api/v1/namespaces/{namespace}/pods/smoke/binding",
            "POST",
            body={
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": "smoke"},
                "target": {"kind": "Node", "name": "gpu-2"},
            },
        )
    assert err.value.status == 409
    assert core.read_namespaced_pod_log("smoke", namespace) == "GPU 0: Tesla T4\nok\n"
    assert core.read_namespaced_pod_log("smoke", namespace, tail_lines=1) == "ok\n"
