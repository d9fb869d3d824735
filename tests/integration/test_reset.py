"""playbooks/reset.yml on a testbed node, against the test cluster's real control plane
(tests/cluster: kube-apiserver 1.37 with its controllers).

What reset must find is put in place first: in the cluster, objects labelled as kubegpu's
(as the gpu_cluster role labels them) next to foreign ones; on the node, the containerd files
as the containerd_runtime module leaves them (its marked drop-in, the main config with an
imports line added and the module's backup of it, in the module's backup naming), next to a
drop-in of someone else's. They are written directly, because containerd cannot be installed
and validated on these nodes within a test's time.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integration import ansible_json

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

REPO = Path(__file__).resolve().parents[2]
OURS = {"app.kubernetes.io/managed-by": "kubegpu", "app.kubernetes.io/part-of": "kubegpu"}

MAIN_BEFORE = (
    'version = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "pause:3.9"\n'
)
MAIN_AFTER = (
    'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n\n'
    '[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "pause:3.9"\n'
)
DROP_IN = (
    "# Managed by kubegpu (kubegpu.gpu.containerd_runtime): the nvidia runtime.\n"
    'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
    '  runtime_type = "io.containerd.runc.v2"\n'
)
FOREIGN = "# a drop-in kubegpu did not write\nversion = 2\n"


def _ssh(testbed: Any, node: str, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        testbed.ssh_argv(node, script),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _reset(
    testbed: Any, tmp: Path, extra: dict[str, Any], *args: str
) -> subprocess.CompletedProcess[str]:
    return ansible_json.playbook(
        "playbooks/reset.yml",
        "-i",
        str(testbed.inventory),
        "-i",
        str(REPO / "inventories" / "testbed"),
        *args,
        extra_vars=extra,
        vars_dir=tmp,
        timeout=1800,
    )


def _runtime_class(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": name, "labels": labels},
        "handler": name,
    }


def test_reset_refuses_without_confirmation_and_removes_only_what_kubegpu_made(
    testbed: Any, kube_cluster: Any, tmp_path: Path
) -> None:
    from kubernetes import client

    node = testbed.node_names[0]
    setup = _ssh(
        testbed,
        node,
        "set -e; mkdir -p /etc/containerd/conf.d; "
        f"printf '%s' '{MAIN_BEFORE}' > /etc/containerd/config.toml.4242.2026-11-30@10:00:00~; "
        "touch -d '2026-11-30 10:00' /etc/containerd/config.toml.4242.2026-11-30@10:00:00~; "
        f"printf '%s' '{MAIN_AFTER}' > /etc/containerd/config.toml; "
        f"printf '%s' '{DROP_IN}' > /etc/containerd/conf.d/99-nvidia.toml; "
        f"printf '%s' '{FOREIGN}' > /etc/containerd/conf.d/50-other.toml",
    )
    assert setup.returncode == 0, setup.stderr
    api = kube_cluster.client()
    nodeapi = client.NodeV1Api(api)
    nodeapi.create_runtime_class(_runtime_class("nvidia", OURS))
    nodeapi.create_runtime_class(_runtime_class("kata", {"team": "infra"}))
    kubeconfig = str(kube_cluster.kubeconfig)
    tags = ["--tags", "cluster,runtime", "--limit", f"{node},localhost"]

    # Without confirmation: a clear failure, and nothing changed anywhere.
    refused = _reset(testbed, tmp_path, {"kubegpu_kubeconfig": kubeconfig}, *tags)
    assert refused.returncode != 0
    assert "set kubegpu_reset_confirm=true to confirm" in refused.stdout + refused.stderr
    assert {rc.metadata.name for rc in nodeapi.list_runtime_class().items} >= {"nvidia", "kata"}
    untouched = _ssh(testbed, node, "cat /etc/containerd/config.toml /etc/containerd/conf.d/*")
    assert untouched.stdout == MAIN_AFTER + FOREIGN + DROP_IN

    confirmed = {"kubegpu_kubeconfig": kubeconfig, "kubegpu_reset_confirm": True}
    done = _reset(testbed, tmp_path, confirmed, *tags)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert kubeconfig not in output
    names = {rc.metadata.name for rc in nodeapi.list_runtime_class().items}
    assert "nvidia" not in names and "kata" in names
    after = _ssh(
        testbed,
        node,
        "cat /etc/containerd/config.toml; echo ---; ls /etc/containerd/conf.d; "
        "ls /etc/containerd | grep -c '~$'",
    )
    main, _, rest = after.stdout.partition("---\n")
    assert main == MAIN_BEFORE
    # the backup kubegpu made when it added the imports line, and the one reset made before
    # taking it out again
    assert rest.split() == ["50-other.toml", "2"]

    # Again: nothing left to remove.
    again = _reset(testbed, tmp_path, confirmed, *tags)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert f"{node}" in again.stdout
    recap = [line for line in again.stdout.splitlines() if line.startswith(node + " ")]
    assert recap and "changed=0" in recap[-1], recap
