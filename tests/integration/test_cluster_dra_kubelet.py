"""DRA end to end on a real node: a kubelet plugin registers with a real kubelet, publishes the
node's ResourceSlice, prepares a claim the real scheduler allocated, and its CDI device reaches
the container through the containerd kubegpu configured.

Each on one node of a derived testbed of its own: a trixie node with containerd 1.7 (number 7)
and one with sid's containerd 2.1 (number 8, pinned as test_container_runtime_suites pins it).
kubegpu's container_runtime role installs and wires its containerd with CDI on: 1.7 has CDI
off by its own defaults and kubegpu's drop-in turns it on; 2.1 has it on by its own. A real
kubelet (tests/cluster, Kubernetes 1.37) joins a real control plane on the node's bridge
(test_container_runtime_suites.kubelet_joined).

The DRA driver is Kubernetes' DRA test driver (k8s.io/kubernetes/test/e2e/dra/test-driver,
tests/cluster/dra_driver.py), standing in for NVIDIA's DRA driver for GPUs, which needs a GPU:
a test double of NVIDIA's driver, but Kubernetes' own kubelet-plugin code. It runs on the node
as a service (where NVIDIA's runs as kubegpu's DaemonSet) under kubegpu's ServiceAccount and
ClusterRole for NVIDIA's kubelet plugin (cluster_manifests.DRA_KUBELET_PLUGIN_RULES), with a
token from the API server's TokenRequest. It publishes devices of driver
test-driver.cdi.k8s.io without attributes, so kubegpu's DeviceClasses (driver gpu.nvidia.com,
attribute type 'gpu' or 'mig') select none of them: the test makes a DeviceClass of its own
that selects the test driver's devices, and claims come from kubegpu's ResourceClaimTemplate
shape (dra_workloads.claim_template) naming that class. For the same reason kubegpu's
readiness check dra_resource_slices (GPUs of driver gpu.nvidia.com by their type attribute)
cannot pass on this driver's slice: the test shows it counts none of its devices as GPUs.

Nothing else is a double: no ResourceSlice, claim status or Node object is written by the test.
"""

from __future__ import annotations

import json
import os
import re
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_manifests as cm
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_readiness as cr
from ansible_collections.kubegpu.gpu.plugins.module_utils import dra_workloads as dw

from kubegpu.testbed import down, up
from tests.cluster import dra_driver
from tests.integration.conftest import derived_testbed_config
from tests.integration.test_container_runtime_suites import (
    MODULE_TASK,
    PIN_SID_CONTAINERD,
    SHELL_IMAGE,
    SUITES,
    Node,
    cri_plugin,
    kubelet_joined,
)
from tests.processes import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

GROUP, VERSION = "resource.k8s.io", "v1"
NS = "dra-work"
DRIVER_NS = "kubegpu-dra-test"
DEVICES = 2
# The test driver's DeviceClass (kubegpu's select driver gpu.nvidia.com by attributes it lacks),
# with an opaque config for the driver: the driver injects it as admin_<key>.
TEST_CLASS = "kubegpu-test.dra-test-driver"
CLASS_PARAMETERS = {"stands_in_for": dw.DRIVER}
# An opaque config in the claim: injected as user_<key>.
CLAIM_PARAMETERS = {"workload": "one-device"}
DRIVER_UNIT = "dra-test-driver"
DRIVER_BIN = "/usr/local/bin/dra-test-driver"
DRIVER_KUBECONFIG = "/etc/kubegpu-test/dra-test-driver.kubeconfig"
CDI_DIR = "/var/run/cdi"
# suite (test_container_runtime_suites.SUITES) -> its number among the derived testbeds
NUMBERS = {"trixie": 7, "sid": 8}


@pytest.fixture(scope="module", params=list(NUMBERS))
def dra_node(
    request: pytest.FixtureRequest, ansible_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Node]:
    """The suite's node, in derived testbed NUMBERS[suite], taken down at the end."""
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (mounts, a bridge, systemd-nspawn)")
    suite = request.param
    config = derived_testbed_config(NUMBERS[suite], f"dra{suite}", SUITES[suite][1])
    try:
        testbed = up(config)
        yield Node(suite, testbed, ansible_bin, tmp_path_factory.mktemp(f"dra-{suite}"))
    finally:
        down(config.state_dir)


def kubegpus_drop_in_sets_cdi(wired: dict[str, Any]) -> bool:
    """containerd 1.x: CDI is off by its own defaults, kubegpu's drop-in turns it on."""
    return bool(wired["containerd_version"].startswith("1."))


@pytest.fixture(scope="module")
def wired(dra_node: Node) -> dict[str, Any]:
    """containerd installed from the suite and wired by kubegpu's container_runtime role; the
    module's result."""
    if SUITES[dra_node.suite][2] != SUITES[dra_node.suite][1]:
        dra_node.ok(PIN_SID_CONTAINERD)
    return dra_node.task(dra_node.play(), MODULE_TASK)


def test_kubegpu_has_cdi_on_in_the_nodes_containerd(dra_node: Node, wired: dict[str, Any]) -> None:
    node = dra_node
    assert wired["containerd_version"].startswith(SUITES[node.suite][3] + "."), wired
    ours = kubegpus_drop_in_sets_cdi(wired)
    # 1.7's own configuration has CDI off and kubegpu's drop-in turns it on; 2.1's has it on.
    own = cri_plugin(node, tomllib.loads(node.ok("containerd config default")), wired)
    assert own["enable_cdi"] is not ours
    drop_in = tomllib.loads(node.ok("cat /etc/containerd/conf.d/99-nvidia.toml"))
    assert drop_in["plugins"][wired["schema"]["plugin"]].get("enable_cdi") is (ours or None)
    effective = cri_plugin(node, node.dump(), wired)
    assert effective["enable_cdi"] is True and CDI_DIR in effective["cdi_spec_dirs"], effective
    assert wired["cdi"]["source"] == ("drop-in" if ours else "containerd default"), wired["cdi"]


@pytest.fixture(scope="module")
def joined(
    dra_node: Node, wired: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    # kubelet at -v=3 logs each DRA plugin it registers (KUBELET_EXTRA_ARGS, kubeadm's way).
    dra_node.put("/etc/default/kubelet", b'KUBELET_EXTRA_ARGS="--v=3"\n')
    with kubelet_joined(dra_node, tmp_path_factory.mktemp("dra-cluster")) as found:
        yield found


def driver_kubeconfig(cluster: Any, token: str) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "kubegpu-test",
                "cluster": {"server": cluster.url, "certificate-authority-data": ca_data(cluster)},
            }
        ],
        "users": [{"name": "dra-driver", "user": {"token": token}}],
        "contexts": [
            {"name": "dra-driver", "context": {"cluster": "kubegpu-test", "user": "dra-driver"}}
        ],
        "current-context": "dra-driver",
    }
    return yaml.safe_dump(doc, sort_keys=False)


def ca_data(cluster: Any) -> str:
    import base64

    return base64.b64encode(Path(cluster.ca_file).read_bytes()).decode()


def slices(custom: Any, node: str) -> list[dict[str, Any]]:
    items = custom.list_cluster_custom_object(GROUP, VERSION, "resourceslices")["items"]
    return [
        s
        for s in items
        if s["spec"].get("driver") == dra_driver.DRIVER and s["spec"].get("nodeName") == node
    ]


def kubelet_plugin_token(joined: dict[str, Any]) -> str:
    """kubegpu's ServiceAccount and ClusterRole for NVIDIA's kubelet plugin
    (cluster_manifests.DRA_KUBELET_PLUGIN_RULES), bound; a token of the account from the API
    server's TokenRequest."""
    from kubernetes import client

    cluster, core = joined["cluster"], joined["core"]
    rbac = client.RbacAuthorizationV1Api(cluster.client())
    core.create_namespace({"metadata": {"name": DRIVER_NS}})
    account = cm.DRA_SERVICE_ACCOUNT
    core.create_namespaced_service_account(DRIVER_NS, {"metadata": {"name": account}})
    rbac.create_cluster_role(
        {"metadata": {"name": cm.DRA_CLUSTER_ROLE_NAME}, "rules": cm.DRA_KUBELET_PLUGIN_RULES}
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": cm.DRA_CLUSTER_ROLE_NAME},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": cm.DRA_CLUSTER_ROLE_NAME,
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": DRIVER_NS}],
        }
    )
    token = cluster.kubectl("-n", DRIVER_NS, "create", "token", account, "--duration=2h")
    assert token.returncode == 0, token.stderr
    return str(token.stdout).strip()


@pytest.fixture(scope="module")
def driver(dra_node: Node, joined: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Kubernetes' DRA test driver's kubelet plugin started on the node under kubegpu's
    ServiceAccount and ClusterRole for NVIDIA's kubelet plugin; its slice published."""
    from kubernetes import client

    node, cluster = dra_node, joined["cluster"]
    custom = client.CustomObjectsApi(cluster.client())
    token = kubelet_plugin_token(joined)
    node.put(DRIVER_KUBECONFIG, driver_kubeconfig(cluster, token).encode(), 0o600)
    node.put(DRIVER_BIN, dra_driver.build_cached().read_bytes(), 0o755)
    assert not slices(custom, node.name)
    # The plugin's socket folder, which a DaemonSet's hostPath volume (DirectoryOrCreate) makes.
    node.ok(f"mkdir -p /var/lib/kubelet/plugins/{dra_driver.DRIVER}")
    command = (
        f"{DRIVER_BIN} --kubeconfig={DRIVER_KUBECONFIG} -v=5 kubelet-plugin "
        f"--node-name={node.name} --num-devices={DEVICES} --cdi-dir={CDI_DIR}"
    )
    with plugin_unit(node, DRIVER_UNIT, command, lambda: slices(custom, node.name)) as started:
        published, seconds = started
        yield {"custom": custom, "slices": published, "timings": {"plugin_to_slice_s": seconds}}


@contextmanager
def plugin_unit(
    node: Node, unit: str, command: str, published: Callable[[], list[dict[str, Any]]]
) -> Iterator[tuple[list[dict[str, Any]], float]]:
    """A kubelet plugin's ``command`` run on ``node`` as the transient systemd unit ``unit``,
    where a DaemonSet would run it; yields the ResourceSlices ``published`` finds once there are
    any and the seconds from the start to then (the unit's log in the error when none come);
    stops the unit at the end."""
    started = time.monotonic()
    node.ok(f"systemd-run --unit={unit} {command}")
    try:
        try:
            found = wait_for(f"the ResourceSlice of {unit}", published)
        except AssertionError as missing:
            log = node.ssh(f"journalctl -u {unit} -o cat | tail -60").stdout
            raise AssertionError(f"{missing}; its log:\n{log}") from None
        yield found, round(time.monotonic() - started, 1)
    finally:
        node.ssh(f"systemctl stop {unit}")


def test_the_driver_registers_with_the_kubelet_and_publishes_the_nodes_slice(
    dra_node: Node, joined: dict[str, Any], driver: dict[str, Any]
) -> None:
    node, core = dra_node, joined["core"]
    (published,) = driver["slices"]
    spec = published["spec"]
    assert spec["pool"]["name"] == node.name
    assert [d["name"] for d in spec["devices"]] == [f"device-{i:02d}" for i in range(DEVICES)]
    # Published by the driver's resourceslice controller (with the ServiceAccount's token, its
    # only credential): owned by the Node, its one field manager the driver's client.
    (owner,) = published["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Node", node.name)
    assert owner["uid"] == core.read_node(node.name).metadata.uid
    managers = {f["manager"] for f in published["metadata"].get("managedFields") or []}
    assert managers == {Path(DRIVER_BIN).name}, managers
    # The kubelet's plugin watcher found the registration socket and registered the plugin.
    reg = f"/var/lib/kubelet/plugins_registry/{dra_driver.DRIVER}-reg.sock"
    node.ok(f"test -S {reg}")
    wait_for(
        "the kubelet's log of the DRA plugin's registration",
        lambda: node.ok(
            "journalctl -u kubelet -o cat | grep 'Registered DRA plugin' "
            f"| grep -F '\"{dra_driver.DRIVER}\"' || true"
        ),
    )
    # kubegpu's readiness check dra_resource_slices counts the GPUs of NVIDIA's driver only
    # (driver gpu.nvidia.com, attribute type 'gpu'): another driver's real slice on the node is
    # no GPU to it.
    every = driver["custom"].list_cluster_custom_object(GROUP, VERSION, "resourceslices")
    check = cr.check_dra_resource_slices(
        {"metadata": {"name": node.name}}, every["items"], DEVICES, {}
    )
    assert (check["status"], check["observed"]) == ("fail", "0 GPU(s)"), check
    print(f"\nKubernetes' DRA test driver (standing in for NVIDIA's): {driver['timings']}")


def driver_class(driver: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "DeviceClass",
        "metadata": {"name": TEST_CLASS},
        "spec": {
            "selectors": [{"cel": {"expression": f"device.driver == '{driver}'"}}],
            "config": [{"opaque": {"driver": driver, "parameters": CLASS_PARAMETERS}}],
        },
    }


def pod_with_claim(name: str, template: str) -> dict[str, Any]:
    """A pod of the shell image: container `with` holds the claim and prints its environment;
    container `without` holds none."""
    script = "env | sort; sleep 600"

    def container(name: str, claims: list[dict[str, str]]) -> dict[str, Any]:
        return {
            "name": name,
            "image": SHELL_IMAGE,
            "imagePullPolicy": "Never",
            "command": ["sh", "-c", script],
            "resources": {"claims": claims},
        }

    return {
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "resourceClaims": [{"name": dw.CLAIM, "resourceClaimTemplateName": template}],
            "containers": [container("with", [{"name": dw.CLAIM}]), container("without", [])],
        },
    }


def claim_of(custom: Any, pod: str) -> dict[str, Any] | None:
    items = custom.list_namespaced_custom_object(GROUP, VERSION, NS, "resourceclaims")["items"]
    for claim in items:
        owners = claim["metadata"].get("ownerReferences") or []
        if any(o["kind"] == "Pod" and o["name"] == pod for o in owners):
            return dict(claim)
    return None


@pytest.fixture(scope="module")
def workspace(joined: dict[str, Any], driver: dict[str, Any]) -> dict[str, Any]:
    core, custom = joined["core"], driver["custom"]
    custom.create_cluster_custom_object(
        GROUP, VERSION, "deviceclasses", driver_class(dra_driver.DRIVER)
    )
    core.create_namespace({"metadata": {"name": NS}})
    wait_for("the default service account", lambda: core.list_namespaced_service_account(NS).items)
    return {"core": core, "custom": custom}


def test_a_claim_is_allocated_prepared_and_its_cdi_device_reaches_the_container(
    dra_node: Node, joined: dict[str, Any], workspace: dict[str, Any]
) -> None:
    node, cluster = dra_node, joined["cluster"]
    core, custom = workspace["core"], workspace["custom"]
    template = dw.claim_template("one-device", NS, "dra-test", TEST_CLASS, [])
    template["spec"]["spec"]["devices"]["config"] = [
        {
            "requests": [dw.REQUEST],
            "opaque": {"driver": dra_driver.DRIVER, "parameters": CLAIM_PARAMETERS},
        }
    ]
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, "resourceclaimtemplates", template)
    started = time.monotonic()
    core.create_namespaced_pod(NS, pod_with_claim("with-claim", "one-device"))
    wait_for(
        "the pod with-claim Running",
        lambda: core.read_namespaced_pod("with-claim", NS).status.phase == "Running",
        timeout_s=120,
    )
    pod_start_s = round(time.monotonic() - started, 1)
    assert core.read_namespaced_pod("with-claim", NS).spec.node_name == node.name

    # The claim the resource-claim controller made from the template, allocated by the scheduler
    # a device of the driver's slice on this node, and reserved for the pod.
    claim = claim_of(custom, "with-claim")
    assert claim is not None
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result["driver"] == dra_driver.DRIVER and result["pool"] == node.name
    assert re.fullmatch(r"device-0[0-9]", result["device"]), result
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["with-claim"]

    # The driver's CDI spec for the prepared claim on the node, and its env in the container
    # that holds the claim (injected by containerd's CDI), not in the one that does not.
    claim_name, uid = claim["metadata"]["name"], claim["metadata"]["uid"]
    spec_file = f"{CDI_DIR}/{dra_driver.DRIVER}-{uid}-{dw.REQUEST}.json"
    spec = json.loads(node.ok(f"cat {spec_file}"))
    (device,) = spec["devices"]
    injected = set(device["containerEdits"]["env"])
    expected = {
        re.sub(r"[^a-zA-Z0-9]", "_", f"claim_{claim_name}_{dw.REQUEST}") + "=true",
        *(f"admin_{k}={v}" for k, v in CLASS_PARAMETERS.items()),
        *(f"user_{k}={v}" for k, v in CLAIM_PARAMETERS.items()),
    }
    assert injected == expected, injected

    def env(container: str) -> set[str]:
        log = wait_for(
            f"the log of {container}",
            lambda: cluster.kubectl("-n", NS, "logs", "with-claim", "-c", container).stdout,
        )
        return set(str(log).splitlines())

    assert expected <= env("with"), env("with")
    assert not expected & env("without")
    print(f"\npod with a DRA claim Running {pod_start_s} s after its creation")

    # Deleting the pod: the kubelet has the driver unprepare the claim (its CDI spec goes) and
    # the claim made from the template goes with the pod.
    core.delete_namespaced_pod("with-claim", NS)
    wait_for("the CDI spec removed", lambda: node.ssh(f"test -e {spec_file}").returncode == 1, 120)
    wait_for("the claim gone", lambda: claim_of(custom, "with-claim") is None, 120)


def test_a_claim_for_more_devices_than_the_slice_has_leaves_its_pod_pending(
    dra_node: Node, workspace: dict[str, Any]
) -> None:
    core, custom = workspace["core"], workspace["custom"]
    template = dw.claim_template("too-many", NS, "dra-test", TEST_CLASS, [])
    request = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    request.update(allocationMode="ExactCount", count=DEVICES + 1)
    assert_left_pending(core, custom, template)


def assert_left_pending(core: Any, custom: Any, template: dict[str, Any]) -> None:
    """A pod whose claim comes from ``template`` (made here, in NS, both named as the template)
    is refused by the scheduler (no slice can satisfy the claim): Pending, bound to no node, its
    claim made by the resource-claim controller but not allocated."""
    name = template["metadata"]["name"]
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, "resourceclaimtemplates", template)
    core.create_namespaced_pod(NS, pod_with_claim(name, name))

    def refused() -> str:
        events = core.list_namespaced_event(
            NS, field_selector=f"involvedObject.name={name},reason=FailedScheduling"
        ).items
        return str(events[0].message) if events else ""

    message = wait_for(f"{name} refused by the scheduler", refused, 120)
    assert "cannot allocate all claims" in message, message
    pod = core.read_namespaced_pod(name, NS)
    assert pod.status.phase == "Pending" and pod.spec.node_name is None
    claim = claim_of(custom, name)
    assert claim is not None and not (claim.get("status") or {}).get("allocation"), claim


def test_with_kubegpus_cdi_setting_off_the_claims_env_reaches_the_container_on_2x_only(
    dra_node: Node, joined: dict[str, Any], wired: dict[str, Any], workspace: dict[str, Any]
) -> None:
    """container_runtime_cdi false: containerd runs with its own CDI default. 1.7's is off, so
    the kubelet's CDI devices for the prepared claim are not injected: what put the driver's env
    in the container above is the CDI that kubegpu turned on. 2.1's is on: the env arrives."""
    node, cluster = dra_node, joined["cluster"]
    core, custom = workspace["core"], workspace["custom"]
    ours = kubegpus_drop_in_sets_cdi(wired)
    off = node.task(node.play(container_runtime_cdi="false"), MODULE_TASK)
    try:
        assert off["cdi"]["source"] == "not managed (cdi false)", off["cdi"]
        assert off["changed"] is ours
        assert cri_plugin(node, node.dump(), wired)["enable_cdi"] is not ours
        core.create_namespaced_pod(NS, pod_with_claim("cdi-off", "one-device"))
        wait_for(
            "the pod cdi-off Running",
            lambda: core.read_namespaced_pod("cdi-off", NS).status.phase == "Running",
            timeout_s=120,
        )
        claim = claim_of(custom, "cdi-off")
        assert claim is not None and claim["status"]["allocation"], claim
        spec_file = f"{CDI_DIR}/{dra_driver.DRIVER}-{claim['metadata']['uid']}-{dw.REQUEST}.json"
        (device,) = json.loads(node.ok(f"cat {spec_file}"))["devices"]  # prepared all the same
        log = wait_for(
            "the log of with",
            lambda: cluster.kubectl("-n", NS, "logs", "cdi-off", "-c", "with").stdout,
        )
        injected = set(device["containerEdits"]["env"])
        assert (injected <= set(str(log).splitlines())) is not ours, log
        core.delete_namespaced_pod("cdi-off", NS)
        wait_for("the claim gone", lambda: claim_of(custom, "cdi-off") is None, 120)
    finally:
        back = node.task(node.play(), MODULE_TASK)
    assert back["cdi"] == wired["cdi"] and cri_plugin(node, node.dump(), wired)["enable_cdi"]
