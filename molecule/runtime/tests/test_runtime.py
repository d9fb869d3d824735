"""Verify of scenario runtime: containerd with the nvidia runtime on the node that can run
containers, read from the node; the other node, which converge did not target, has no
containerd.

The drop-in must be what containerd really runs with: `containerd config dump` (the files as
containerd merges them) and the running daemon's own log of its CRI configuration, written
when the current service invocation started, both show the nvidia runtime.
"""

from __future__ import annotations

import tomllib

DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
NVIDIA_RUNTIME = "/usr/bin/nvidia-container-runtime"
CRI = "io.containerd.grpc.v1.cri"


def can_run_containers(host) -> bool:
    return bool(host.ansible.get_variables().get("kubegpu_testbed_containers"))


def test_containerd_is_installed_enabled_and_running(host) -> None:
    if not can_run_containers(host):
        assert not host.package("containerd").is_installed
        return
    assert host.package("containerd").is_installed
    service = host.service("containerd")
    assert service.is_enabled
    assert service.is_running


def test_the_main_config_imports_our_drop_in(host) -> None:
    if not can_run_containers(host):
        assert not host.file(DROP_IN).exists
        return
    main = tomllib.loads(host.file("/etc/containerd/config.toml").content_string)
    assert "/etc/containerd/conf.d/*.toml" in main["imports"]
    drop_in = host.file(DROP_IN)
    assert (drop_in.user, drop_in.group) == ("root", "root")
    assert drop_in.content_string.startswith("# Managed by kubegpu")
    runtimes = tomllib.loads(drop_in.content_string)["plugins"][CRI]["containerd"]["runtimes"]
    assert runtimes["nvidia"]["options"]["BinaryName"] == NVIDIA_RUNTIME


def test_containerd_config_dump_has_the_nvidia_runtime(host) -> None:
    if not can_run_containers(host):
        assert host.run("command -v containerd").rc != 0
        return
    dump = tomllib.loads(host.check_output("containerd config dump"))
    runtimes = dump["plugins"][CRI]["containerd"]["runtimes"]
    assert runtimes["nvidia"]["runtime_type"] == "io.containerd.runc.v2"
    assert runtimes["nvidia"]["options"]["BinaryName"] == NVIDIA_RUNTIME
    # Same cgroup driver as runc, and runc itself still there.
    assert runtimes["nvidia"]["options"]["SystemdCgroup"] == runtimes["runc"]["options"].get(
        "SystemdCgroup", False
    )
    # The binary it names is the toolkit's, installed and executable.
    binary = host.file(NVIDIA_RUNTIME)
    assert binary.is_file and binary.mode & 0o111


def test_the_running_containerd_loaded_the_nvidia_runtime(host) -> None:
    if not can_run_containers(host):
        assert host.run("systemctl cat containerd.service").rc != 0
        return
    invocation = host.check_output("systemctl show -p InvocationID --value containerd")
    assert invocation
    log = host.check_output("journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID=%s", invocation)
    started = [ln for ln in log.splitlines() if "Start cri plugin with config" in ln]
    assert len(started) == 1, log[-2000:]
    assert "nvidia:{Type:io.containerd.runc.v2 " in started[0]
    assert f"BinaryName:{NVIDIA_RUNTIME}" in started[0]
    plugins = host.check_output("ctr plugins ls")
    cri = [
        ln.split()
        for ln in plugins.splitlines()
        if ln.split()[:2] == ["io.containerd.grpc.v1", "cri"]
    ]
    assert [row[-1] for row in cri] == ["ok"]
