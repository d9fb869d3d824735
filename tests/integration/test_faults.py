"""Faults the toolkit must survive, each injected for real on testbed nodes.

- A node loses power mid-run: every process of the node is SIGKILLed at once (its launcher,
  systemd-nspawn and the whole node: a power cut), when the run starts the node's apt task.
  The other nodes complete, the result and its summary name the lost node, and a re-run after
  the node is powered on again converges it.
- dpkg is SIGKILLed during the kubelet role's package install, at the moment it starts to
  configure what it unpacked (a one-shot dpkg pre-invoke hook the test installs on the node,
  which removes itself and kills its dpkg). The next run repairs dpkg (preflight, module
  dpkg_state) and converges; `dpkg --audit` is empty afterwards.
- The apt frontend lock is held by another process (a POSIX lock, as apt takes it: a flock(2)
  lock does not conflict with apt's fcntl locks on Linux). Held past kubegpu_apt_lock_timeout:
  a clear error naming the lock, the holder's PID and its command line, before any host
  changes. Released within the timeout: the run waits and proceeds.
- A third party rewrites /etc/default/kubelet and the KubeletConfiguration: the next run puts
  back only kubegpu's parts, keeps the third party's, and the run after reports changed=0.
- The controller is SIGKILLed (ansible-playbook's whole process tree) the moment the API
  server shows the node cordoned with its record; the re-run resumes it, proves it and
  uncordons it. Node states are recorded through a real watch: never cordoned without record.
  The API server is the test cluster's (tests/cluster), reached from the controller on
  loopback; the node runs no kubelet, so its part is stood in for (tests/cluster/standin.py):
  the Node's registration and heartbeat, its pod's status, the end of an evicted pod's deletion.

Runs go through kubegpu's Python API (so results and summaries are the real ones), except the
interrupted upgrade, whose controller must be a process the test can kill.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import kubegpu
from kubegpu.events import Event
from kubegpu.report import summary_table
from kubegpu.result import RunResult
from kubegpu.testbed import nodes as tbnodes
from kubegpu.testbed._proc import pid_alive
from tests.cluster.controlplane import KubeCluster
from tests.integration.test_upgrade_driver import _pod, kubelet_free_nodes, run_pods
from tests.processes import kill_tree

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
ANNOTATION = "kubegpu.io/driver-upgrade"
KUBELET_ENV = "/etc/default/kubelet"
KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
APT_TASK = "Install PyYAML"
LOCK_TASK = "Wait for the apt and dpkg locks"

THIRD_PARTY_ENV = (
    "# Written by the site's provisioning tool.\n"
    'KUBELET_EXTRA_ARGS="--node-ip=10.20.0.15 --max-pods 180"\n'
)
THIRD_PARTY_CONFIG = """\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
featureGates:
  GracefulNodeShutdown: true
"""
GATES = {"kubelet_gpu_feature_gates": {"KubeletPodResourcesGet": True}}


# ------------------------------------------------------------------------------ helpers


def _ssh(testbed: Any, node: str, script: str, timeout: float = 120) -> str:
    proc = subprocess.run(
        testbed.ssh_argv(node, script), capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"{node}: {script!r} failed: {proc.stderr[-2000:]}"
    return proc.stdout


def _inventory(testbed: Any) -> list[str]:
    return [str(testbed.inventory), str(REPO / "inventories" / "testbed")]


def _kubelet(testbed: Any, limit: str | None = None, **kwargs: Any) -> RunResult:
    """site.yml with the kubelet tag: preflight (always), then the kubelet_gpu role."""
    extra = dict(GATES, **kwargs.pop("extra_vars", {}))
    return kubegpu.bootstrap(
        _inventory(testbed), limit=limit, tags=["kubelet"], extra_vars=extra, **kwargs
    )


def _why(result: RunResult) -> str:
    return summary_table(result)[-3000:]


def _write(testbed: Any, node: str, files: dict[str, str]) -> None:
    _ssh(
        testbed,
        node,
        "set -e; "
        + "; ".join(
            f"mkdir -p {shlex.quote(os.path.dirname(path))}; "
            f"printf '%s' {shlex.quote(text)} > {shlex.quote(path)}"
            for path, text in files.items()
        ),
    )


def _put_third_party_files(testbed: Any, node: str) -> None:
    _write(testbed, node, {KUBELET_ENV: THIRD_PARTY_ENV, KUBELET_CONFIG: THIRD_PARTY_CONFIG})


def _env_args(testbed: Any, node: str) -> list[str]:
    text = _ssh(testbed, node, f"cat {KUBELET_ENV}")
    line = next(x for x in text.splitlines() if x.startswith("KUBELET_EXTRA_ARGS="))
    return line.partition("=")[2].strip('"').split()


def _paths(testbed: Any, node: str) -> tbnodes.NodePaths:
    return tbnodes.NodePaths(testbed.state_dir / "nodes" / node)


def power_cut(testbed: Any, node: str) -> list[int]:
    """SIGKILL every process of the node at once: launcher, nspawn, systemd, sshd, all."""
    paths = _paths(testbed, node)
    tops = tbnodes.recorded_cgroups(paths.cgroups)
    pids = tbnodes.cgroup_pids(tops)
    assert pids, f"no processes found for node {node}"
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 15
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    tbnodes.remove_cgroups(tops)
    return sorted(pids)


def power_on(testbed: Any, node: str) -> None:
    """Boot a node that was cut off again, on its own (kept) disk, and wait for SSH."""
    current = next(n for n in testbed.nodes if n.name == node)
    paths = _paths(testbed, node)
    launcher = tbnodes._read_pid(paths.launcher_pid)
    if launcher and tbnodes.owned_pid(launcher, str(testbed.state_dir)):
        return  # still (or again) running
    spec = tbnodes.NodeSpec(
        name=node,
        address=current.address,
        prefixlen=int(testbed.config.subnet.rpartition("/")[2]),
        containers=current.containers,
        simulate_capture=current.simulated_gpu,
    )
    ctx = tbnodes.NodeContext(
        state_dir=testbed.state_dir,
        bridge=testbed.bridge,
        bridge_address=testbed.bridge_address,
        proxy_url=testbed.apt_proxy_url,
        operator_pubkey="",
        hosts_entries="",
        apt_extra="",
    )
    pid = tbnodes.start(paths, spec, ctx)
    tbnodes.wait_ready(
        node, current.address, testbed.ssh_key, testbed.known_hosts, pid, paths.console_log
    )


@pytest.fixture
def lost_node(testbed: Any) -> Iterator[str]:
    node = testbed.node_names[0]
    yield node
    power_on(testbed, node)  # whatever happened in the test


# ------------------------------------------------------------------------------ 1. unreachable


def test_node_lost_mid_run_others_complete_and_a_rerun_converges_it(
    testbed: Any, lost_node: str
) -> None:
    names = list(testbed.node_names)
    others = [n for n in names if n != lost_node]
    for node in names:
        _put_third_party_files(testbed, node)
    # Without PyYAML the role's first kubelet_config call only checks (the merge needs it), so
    # the node is lost in its package task before any of its kubelet files change.
    # (Only when it is installed: on nodes fresh from the base image, as when this module runs
    # alone, apt knows no such package yet and the purge would fail.)
    _ssh(
        testbed,
        lost_node,
        "if dpkg-query -W python3-yaml >/dev/null 2>&1; then apt-get purge -y -q python3-yaml"
        " >/dev/null; fi",
    )
    cut: list[int] = []

    def on_event(event: Event) -> None:
        if (
            not cut
            and event.kind == "host_task_start"
            and event.host == lost_node
            and APT_TASK in event.task
        ):
            cut.extend(power_cut(testbed, lost_node))

    first = _kubelet(testbed, on_event=on_event)
    assert cut, "the run never reached the node's package task"
    summary = summary_table(first)
    assert not first.ok and first.rc != 0
    assert first.unreachable_hosts == [lost_node], summary
    assert f"UNREACHABLE {lost_node}: [" in summary
    assert first.failed == [], summary
    for node in others:
        stats = first.hosts[node]
        assert stats.failures == 0 and stats.unreachable == 0, summary
        assert "nvidia.com/gpu.present=true" in " ".join(_env_args(testbed, node))

    power_on(testbed, lost_node)
    again = _kubelet(testbed)
    assert again.ok, _why(again)
    assert again.hosts[lost_node].changed > 0
    assert all(again.hosts[n].changed == 0 for n in others), _why(again)
    for node in names:
        args = _env_args(testbed, node)
        # Ours converged, and nothing of the third party's was lost.
        assert "--node-labels=nvidia.com/gpu.present=true" in args, args
        assert args[:3] == ["--node-ip=10.20.0.15", "--max-pods", "180"], args
        config = yaml.safe_load(_ssh(testbed, node, f"cat {KUBELET_CONFIG}"))
        assert config["featureGates"] == {
            "GracefulNodeShutdown": True,
            "KubeletPodResourcesGet": True,
        }
        assert config["clusterDNS"] == ["10.96.0.10"]
        assert _ssh(testbed, node, "dpkg --audit") == ""


# ------------------------------------------------------------------------------ 2. dpkg killed

KILL_HOOK = "/usr/local/sbin/kubegpu-fault-kill-dpkg"
KILL_HOOK_CFG = "/etc/dpkg/dpkg.cfg.d/zz-kubegpu-fault-kill"
KILL_HOOK_SCRIPT = f"""#!/bin/sh
# Test fault injector (kubegpu tests/integration/test_faults.py): one shot. When dpkg starts to
# configure what it unpacked, remove this hook and SIGKILL that dpkg.
[ "$DPKG_HOOK_ACTION" = configure ] || exit 0
rm -f {KILL_HOOK_CFG}
pid=$PPID
while [ "$pid" -gt 1 ] && [ "$(cat /proc/$pid/comm)" != dpkg ]; do
  pid=$(cut -d' ' -f4 /proc/$pid/stat)
done
[ "$pid" -gt 1 ] && kill -9 "$pid"
exit 0
"""


def test_dpkg_killed_during_an_install_is_repaired_by_the_next_run(testbed: Any) -> None:
    node = testbed.node_names[-1]
    _put_third_party_files(testbed, node)
    _ssh(testbed, node, "apt-get purge -y -q python3-yaml >/dev/null; dpkg --audit")
    packages_before = set(_ssh(testbed, node, "dpkg-query -W -f '${Package}\\n'").split())
    _ssh(
        testbed,
        node,
        f"cat > {KILL_HOOK} <<'EOF'\n{KILL_HOOK_SCRIPT}EOF\nchmod 0755 {KILL_HOOK}; "
        f"echo 'pre-invoke={KILL_HOOK}' > {KILL_HOOK_CFG}",
    )
    try:
        killed = _kubelet(testbed, limit=node)
        assert not killed.ok
        failure = [f for f in killed.failed if f.host == node]
        assert failure and APT_TASK in failure[0].task, _why(killed)
        assert "signal 9" in failure[0].message or "dpkg" in failure[0].message, failure
        assert _ssh(testbed, node, f"test ! -e {KILL_HOOK_CFG} && echo gone").strip() == "gone"
        # What a killed dpkg leaves: a package unpacked and never configured.
        audit = _ssh(testbed, node, "dpkg --audit || true")
        assert "python3-yaml" in audit, audit
        status = _ssh(testbed, node, "dpkg-query -W -f '${Status}' python3-yaml")
        assert status == "install ok unpacked", status

        seen: list[Event] = []
        repaired = _kubelet(testbed, limit=node, on_event=seen.append)
        assert repaired.ok, _why(repaired)
        fixed = [e for e in seen if e.kind == "ok" and LOCK_TASK in e.task]
        assert fixed and fixed[0].changed, [e.task for e in seen]
        res = fixed[0].data["res"]
        assert res["repaired"] is True and res["interrupted"] is True
        assert any("python3-yaml" in line for line in res["audit"]), res
        assert res["audit_after"] == []
    finally:
        _ssh(testbed, node, f"rm -f {KILL_HOOK_CFG} {KILL_HOOK}")
    assert _ssh(testbed, node, "dpkg --audit") == ""
    assert _ssh(testbed, node, "dpkg-query -W -f '${Status}' python3-yaml") == (
        "install ok installed"
    )
    # No data lost: every package known before is still known, the kubelet files converged.
    assert packages_before <= set(_ssh(testbed, node, "dpkg-query -W -f '${Package}\\n'").split())
    assert _env_args(testbed, node)[:3] == ["--node-ip=10.20.0.15", "--max-pods", "180"]
    assert "--node-labels=nvidia.com/gpu.present=true" in _env_args(testbed, node)

    # And a run on the repaired node changes nothing.
    idle = _kubelet(testbed, limit=node)
    assert idle.ok and idle.hosts[node].changed == 0, _why(idle)


# ------------------------------------------------------------------------------ 3. lock held

HOLD_UNIT = "kubegpu-fault-apt-lock"
HOLD = (
    f"systemd-run --quiet --unit={HOLD_UNIT} --collect /usr/bin/python3 -c "
    '\'import fcntl, time; f = open("/var/lib/dpkg/lock-frontend", "w"); '
    "fcntl.lockf(f, fcntl.LOCK_EX); time.sleep(600)'; "
    f"sleep 0.5; systemctl show -p MainPID --value {HOLD_UNIT}"
)


def test_apt_lock_held_is_waited_for_then_a_clear_error(testbed: Any) -> None:
    node = testbed.node_names[1]
    pid = int(_ssh(testbed, node, HOLD).strip())
    try:
        blocked = _kubelet(testbed, limit=node, extra_vars={"kubegpu_apt_lock_timeout": 3})
        assert not blocked.ok
        failure = [f for f in blocked.failed if f.host == node]
        assert failure and LOCK_TASK in failure[0].task, _why(blocked)
        message = failure[0].message
        assert "/var/lib/dpkg/lock-frontend" in message, message
        assert f"PID {pid} (/usr/bin/python3 -c import fcntl" in message, message
        assert "within 3 s (kubegpu_apt_lock_timeout)" in message, message
        assert blocked.hosts[node].changed == 0
    finally:
        _ssh(testbed, node, f"systemctl stop {HOLD_UNIT} || true")

    # Held again, and let go 4 s after the lock task starts: the run waits, then proceeds.
    pid = int(_ssh(testbed, node, HOLD).strip())
    timers: list[threading.Timer] = []
    seen: list[Event] = []

    def on_event(event: Event) -> None:
        seen.append(event)
        if not timers and event.kind == "host_task_start" and LOCK_TASK in event.task:
            timer = threading.Timer(4, _ssh, (testbed, node, f"systemctl stop {HOLD_UNIT}"))
            timers.append(timer)
            timer.start()

    try:
        waited = _kubelet(
            testbed, limit=node, on_event=on_event, extra_vars={"kubegpu_apt_lock_timeout": 60}
        )
    finally:
        for timer in timers:
            timer.join()
        _ssh(testbed, node, f"systemctl stop {HOLD_UNIT} 2>/dev/null || true")
    assert waited.ok, _why(waited)
    res = next(e for e in seen if e.kind == "ok" and LOCK_TASK in e.task).data["res"]
    assert res["lock_wait_seconds"] >= 2, res
    assert [h["pid"] for h in res["lock_holders"]] == [pid], res


# ------------------------------------------------------------------------------ 4. third party


def test_third_party_rewrite_of_kubelet_files_heals_only_our_parts(testbed: Any) -> None:
    node = testbed.node_names[1]
    _put_third_party_files(testbed, node)
    first = _kubelet(testbed, limit=node)
    assert first.ok, _why(first)

    # A provisioning tool rewrites both files from its own template: our flag and gate gone,
    # its own new ones added.
    rewritten_env = 'KUBELET_EXTRA_ARGS="--node-ip=10.20.0.99 --max-pods=250 --v=2"\n'
    rewritten_config = THIRD_PARTY_CONFIG.replace(
        "cgroupDriver: systemd\n", "cgroupDriver: systemd\nshutdownGracePeriod: 30s\n"
    ).replace("10.96.0.10", "10.96.0.53")
    _write(testbed, node, {KUBELET_ENV: rewritten_env, KUBELET_CONFIG: rewritten_config})
    healed = _kubelet(testbed, limit=node)
    assert healed.ok and healed.hosts[node].changed > 0, _why(healed)
    assert _env_args(testbed, node) == [
        "--node-ip=10.20.0.99",
        "--max-pods=250",
        "--v=2",
        "--node-labels=nvidia.com/gpu.present=true",
    ]
    config = yaml.safe_load(_ssh(testbed, node, f"cat {KUBELET_CONFIG}"))
    expected = yaml.safe_load(rewritten_config)
    expected["featureGates"]["KubeletPodResourcesGet"] = True
    assert config == expected

    steady = _kubelet(testbed, limit=node)
    assert steady.ok and steady.hosts[node].changed == 0, _why(steady)


# ------------------------------------------------------------------------------ 5. upgrade


class NodeStates:
    """Every (unschedulable, record) state a node passes through, from a real watch; calls
    `on_cordon` once, the first time the node is seen cordoned with its record."""

    def __init__(self, api_client: Any, name: str, on_cordon: Any = None) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.name = name
        self.on_cordon = on_cordon
        self.fired = False
        self.seen: list[tuple[bool, dict[str, Any]]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from kubernetes import watch

        while not self.stop.is_set():
            for event in watch.Watch().stream(
                self.core.list_node, field_selector=f"metadata.name={self.name}", timeout_seconds=2
            ):
                node = event["object"]
                raw = (node.metadata.annotations or {}).get(ANNOTATION)
                state = (bool(node.spec.unschedulable), json.loads(raw) if raw else {})
                self.seen.append(state)
                if state[0] and state[1] and not self.fired and self.on_cordon is not None:
                    self.fired = True
                    self.on_cordon()

    def __enter__(self) -> NodeStates:
        self.thread.start()
        time.sleep(1)
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(2)
        self.stop.set()
        self.thread.join(timeout=10)


def _upgrade(
    testbed: Any, kubeconfig: Path, tmp: Path, node: str, **more: Any
) -> subprocess.Popen[str]:
    extra = tmp / "extra.json"
    extra.write_text(
        json.dumps(
            {
                "kubegpu_kubeconfig": str(kubeconfig),
                "kubegpu_upgrade_expected_driver": "515",
                "kubegpu_container_runtime": "none",
                "kubegpu_check_kubelet": False,
                "kubegpu_upgrade_drain_timeout": 60,
                **more,
            }
        )
    )
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    bindir = Path(sys.executable).parent
    return subprocess.Popen(
        [
            str(bindir / "ansible-playbook"),
            *[arg for inv in _inventory(testbed) for arg in ("-i", inv)],
            str(REPO / "playbooks" / "upgrade_driver.yml"),
            "--skip-tags",
            "driver,toolkit",
            "--limit",
            node,
            "-e",
            f"@{extra}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=REPO,
        start_new_session=True,
    )


# The upgrade's workload pods, in a namespace of their own on the session's cluster.
WORKLOAD_NS = "kubegpu-faults-work"


@pytest.fixture
def upgrade_target(testbed: Any, kube_cluster: KubeCluster) -> Iterator[tuple[Any, str]]:
    """(CoreV1Api of the test cluster, the testbed node with a simulated GPU), the node
    registered there as its kubelet would, uncordoned and without an upgrade record, its
    kubelet's part stood in for while the test runs."""
    gpu_nodes = [n.name for n in testbed.nodes if n.simulated_gpu]
    if not gpu_nodes:
        pytest.skip("needs a testbed node with a simulated GPU")
    node = gpu_nodes[0]
    with kubelet_free_nodes(kube_cluster, [node], WORKLOAD_NS) as (core, _):
        yield core, node


@pytest.mark.cluster
def test_controller_killed_after_cordon_resumes_and_finishes_the_node(
    testbed: Any, kube_cluster: KubeCluster, upgrade_target: tuple[Any, str], tmp_path: Path
) -> None:
    core, node = upgrade_target
    server = kube_cluster
    pod = _pod(f"trainer-{node}", node, gpu=True, namespace=WORKLOAD_NS)
    run_pods(core, [pod])

    procs: list[subprocess.Popen[str]] = []

    def kill_controller() -> None:
        kill_tree(procs[0].pid)

    with NodeStates(server.client(), node, on_cordon=kill_controller) as first:
        procs.append(_upgrade(testbed, server.kubeconfig, tmp_path, node))
        out, _ = procs[0].communicate(timeout=300)
    assert first.fired, out[-3000:]
    assert procs[0].returncode == -signal.SIGKILL
    stranded = core.read_node(node)
    record = json.loads(stranded.metadata.annotations[ANNOTATION])
    assert stranded.spec.unschedulable is True
    assert record["state"] == "in_progress" and record["target"] == "535", record

    with NodeStates(server.client(), node) as second:
        again = _upgrade(testbed, server.kubeconfig, tmp_path, node)
        out, _ = again.communicate(timeout=300)
    assert again.returncode == 0, out[-3000:]
    finished = core.read_node(node)
    done = json.loads(finished.metadata.annotations[ANNOTATION])
    assert not finished.spec.unschedulable
    assert done["state"] == "done", done
    assert done["started"] == record["started"], (done, record)
    # The GPU pod was evicted by the resumed drain; no state was ever cordoned without record.
    assert pod["metadata"]["name"] not in {
        p.metadata.name for p in core.list_namespaced_pod(WORKLOAD_NS).items
    }
    for unschedulable, rec in first.seen + second.seen:
        assert not unschedulable or rec.get("state") in ("in_progress", "failed"), (
            first.seen + second.seen
        )


STAND_IN_DCGM = """\
[Unit]
Description=kubegpu TEST STAND-IN for NVIDIA's nvidia-dcgm host engine (no GPU here)

[Service]
ExecStart=/bin/sleep infinity
"""
STOPPED_FILE = "/var/lib/kubegpu/upgrade-stopped-services.json"
# Holds a node's shutdown 5 s (a unit whose stop sleeps), so that a test sees it going down.
SLOW_SHUTDOWN = """\
[Unit]
Description=kubegpu TEST STAND-IN: a service that takes 5 s to stop

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/true
ExecStop=/bin/sleep 5
"""


@pytest.mark.cluster
def test_controller_killed_after_the_gpu_consumers_stopped_starts_them_on_resume(
    testbed: Any, kube_cluster: KubeCluster, upgrade_target: tuple[Any, str], tmp_path: Path
) -> None:
    """The upgrade stops the node's GPU consumers (here a STAND-IN nvidia-dcgm unit, started
    but not enabled, as a host engine started by hand is) before the driver changes; the
    controller is SIGKILLed the moment the unit stops. The resumed run finds it stopped, and
    starts it again from what the node remembered; nothing of it is left behind."""
    core, node = upgrade_target
    server = kube_cluster
    unit = "/etc/systemd/system/nvidia-dcgm.service"
    _write(testbed, node, {unit: STAND_IN_DCGM})
    _ssh(
        testbed, node, f"rm -f {STOPPED_FILE}; systemctl daemon-reload; systemctl start nvidia-dcgm"
    )
    try:
        # Killed when the controller starts the task after the stop: the stop has finished.
        first = _upgrade(testbed, server.kubeconfig, tmp_path, node)
        seen, stopping = [], False
        assert first.stdout is not None
        for line in first.stdout:
            seen.append(line)
            if line.startswith("TASK [") and stopping:
                kill_tree(first.pid)
                break
            stopping = stopping or line.startswith("TASK [Stop the GPU consumers")
        first.communicate(timeout=60)
        assert first.returncode == -signal.SIGKILL, "".join(seen)[-3000:]
        assert _ssh(testbed, node, "systemctl is-active nvidia-dcgm || true").strip() == "inactive"
        assert json.loads(_ssh(testbed, node, f"cat {STOPPED_FILE}")) == ["nvidia-dcgm.service"]

        again = _upgrade(testbed, server.kubeconfig, tmp_path, node)
        out, _ = again.communicate(timeout=300)
        assert again.returncode == 0, out[-3000:]
        assert _ssh(testbed, node, "systemctl is-active nvidia-dcgm || true").strip() == "active"
        assert _ssh(testbed, node, f"test -e {STOPPED_FILE} && echo left || echo gone").strip() == (
            "gone"
        )
        assert not core.read_node(node).spec.unschedulable
    finally:
        _ssh(
            testbed,
            node,
            f"systemctl stop nvidia-dcgm || true; rm -f {unit} {STOPPED_FILE}; "
            "systemctl daemon-reload",
        )
        core.patch_node(
            node,
            {"spec": {"unschedulable": None}, "metadata": {"annotations": {ANNOTATION: None}}},
        )


def _reset_kubelet(testbed: Any, tmp: Path, node: str) -> subprocess.Popen[str]:
    """playbooks/reset.yml, its kubelet layer, on one node, as a process the test can kill."""
    extra = tmp / "reset.json"
    extra.write_text(json.dumps({"kubegpu_reset_confirm": True}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.Popen(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            *[arg for inv in _inventory(testbed) for arg in ("-i", inv)],
            str(REPO / "playbooks" / "reset.yml"),
            "--tags",
            "kubelet",
            "--limit",
            node,
            "-e",
            f"@{extra}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=REPO,
        start_new_session=True,
    )


def test_reset_killed_midway_completes_on_the_next_run_and_keeps_the_other_settings(
    testbed: Any, tmp_path: Path
) -> None:
    """The controller is SIGKILLed the moment reset has undone the kubelet settings and starts
    its next step. The next reset completes and changes nothing more; the run after it
    neither; the files hold the third party's settings, exactly as before kubegpu."""
    node = testbed.node_names[1]
    _put_third_party_files(testbed, node)
    before = _ssh(testbed, node, f"cat {KUBELET_ENV} {KUBELET_CONFIG}")
    converged = _kubelet(testbed, limit=node)
    assert converged.ok, _why(converged)
    assert _ssh(testbed, node, f"cat {KUBELET_ENV} {KUBELET_CONFIG}") != before

    first = _reset_kubelet(testbed, tmp_path, node)
    seen = []
    assert first.stdout is not None
    for line in first.stdout:
        seen.append(line)
        if line.startswith("TASK [Remove kubegpu's kubelet drop-in]"):
            kill_tree(first.pid)
            break
    first.communicate(timeout=60)
    assert first.returncode == -signal.SIGKILL, "".join(seen)[-3000:]
    # Cut off after the undo: the settings are back, the record is gone.
    assert _ssh(testbed, node, f"cat {KUBELET_ENV} {KUBELET_CONFIG}") == before
    record = "/etc/ansible/facts.d/kubegpu_kubelet.fact"
    assert _ssh(testbed, node, f"test -e {record} && echo left || echo gone").strip() == "gone"

    for attempt in ("resumed", "after"):
        again = _reset_kubelet(testbed, tmp_path, node)
        out, _ = again.communicate(timeout=600)
        assert again.returncode == 0, f"{attempt}: {out[-3000:]}"
        recap = out[out.index("PLAY RECAP") :]
        assert f"{node}" in recap and "changed=0" in recap.split(node, 1)[1].splitlines()[0], recap
        assert _ssh(testbed, node, f"cat {KUBELET_ENV} {KUBELET_CONFIG}") == before


def _boot_id(testbed: Any, node: str) -> str:
    return _ssh(testbed, node, "cat /proc/sys/kernel/random/boot_id").strip()


@pytest.mark.cluster
def test_controller_killed_while_the_node_reboots_resumes_and_brings_the_consumers_back(
    testbed: Any, kube_cluster: KubeCluster, upgrade_target: tuple[Any, str], tmp_path: Path
) -> None:
    """The upgrade reboots the node (here told by the variable the driver role sets,
    nvidia_driver_installed.reboot_pending, as no driver changes on the testbed) and the
    controller is SIGKILLed while the node goes down. The node boots without the STAND-IN
    nvidia-dcgm unit (started by hand, not enabled); the resumed run reboots it again, proves
    it, starts the unit from what the node remembered and uncordons it."""
    core, node = upgrade_target
    server = kube_cluster
    unit = "/etc/systemd/system/nvidia-dcgm.service"
    slow = "/etc/systemd/system/kubegpu-test-slow-shutdown.service"
    _write(testbed, node, {unit: STAND_IN_DCGM, slow: SLOW_SHUTDOWN})
    _ssh(
        testbed,
        node,
        f"rm -f {STOPPED_FILE}; systemctl daemon-reload; "
        "systemctl start nvidia-dcgm kubegpu-test-slow-shutdown",
    )
    booted = _boot_id(testbed, node)
    reboot = {
        "nvidia_driver_installed": {"reboot_pending": True},
        "kubegpu_upgrade_reboot_timeout": 300,
    }
    try:
        first = _upgrade(testbed, server.kubeconfig, tmp_path, node, **reboot)
        seen = []
        assert first.stdout is not None
        for line in first.stdout:
            seen.append(line)
            if line.startswith("TASK [Reboot the node to load the new kernel module]"):
                # Killed once the node is going down (its shutdown held 5 s by a stand-in
                # unit): its SSH answers no more, or it already booted again.
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    probe = subprocess.run(
                        testbed.ssh_argv(node, "cat /proc/sys/kernel/random/boot_id"),
                        capture_output=True,
                        text=True,
                        timeout=30,
                    )
                    if probe.returncode != 0 or probe.stdout.strip() != booted:
                        break
                    time.sleep(0.1)
                kill_tree(first.pid)
                break
        first.communicate(timeout=60)
        assert first.returncode == -signal.SIGKILL, "".join(seen)[-3000:]

        def up_again() -> bool:
            probe = subprocess.run(testbed.ssh_argv(node, "true"), capture_output=True, timeout=30)
            return probe.returncode == 0

        deadline = time.monotonic() + 180
        while not up_again() and time.monotonic() < deadline:
            time.sleep(1)
        assert _boot_id(testbed, node) != booted, "the node did not reboot"
        assert _ssh(testbed, node, "systemctl is-active nvidia-dcgm || true").strip() == "inactive"
        assert core.read_node(node).spec.unschedulable is True

        again = _upgrade(testbed, server.kubeconfig, tmp_path, node, **reboot)
        out, _ = again.communicate(timeout=600)
        assert again.returncode == 0, out[-3000:]
        assert _ssh(testbed, node, "systemctl is-active nvidia-dcgm || true").strip() == "active"
        assert _ssh(testbed, node, f"test -e {STOPPED_FILE} && echo left || echo gone").strip() == (
            "gone"
        )
        finished = core.read_node(node)
        assert not finished.spec.unschedulable
        assert json.loads(finished.metadata.annotations[ANNOTATION])["state"] == "done"
    finally:
        _ssh(
            testbed,
            node,
            f"systemctl stop nvidia-dcgm || true; rm -f {unit} {slow} {STOPPED_FILE}; "
            "systemctl daemon-reload",
        )
        core.patch_node(
            node,
            {"spec": {"unschedulable": None}, "metadata": {"annotations": {ANNOTATION: None}}},
        )
