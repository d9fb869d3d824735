"""Verify of scenario driver: the NVIDIA driver on the node with the SIMULATED GPU, read from
the node; the GPU-less node, which converge did not target, must have none of it.

No GPU and no loadable kernel module exist here, so the real nvidia-smi of the installed
packages must fail the way it does on a host whose module is not loaded (exit status 9), while
the testbed's replaying nvidia-smi (the SIMULATED GPU) is left as it was.
"""

from __future__ import annotations

import json

PACKAGES = ("nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi", "libcuda1")
BLACKLIST = "/etc/modprobe.d/blacklist-nouveau.conf"
FACT = "/etc/ansible/facts.d/kubegpu_driver.fact"


def simulated_gpu(host) -> dict | None:
    return host.ansible.get_variables().get("kubegpu_testbed_simulated_gpu")


def test_the_driver_packages_are_installed_held_and_of_branch_535(host) -> None:
    if simulated_gpu(host) is None:
        for name in PACKAGES:
            assert not host.package(name).is_installed, name
        return
    for name in PACKAGES:
        package = host.package(name)
        assert package.is_installed, name
        assert package.version.startswith("535."), (name, package.version)
        want = host.check_output("dpkg-query -W -f='${db:Status-Want}' %s", name)
        assert want == "hold", name


def test_nouveau_is_blacklisted_by_our_file(host) -> None:
    blacklist = host.file(BLACKLIST)
    if simulated_gpu(host) is None:
        assert not blacklist.exists
        return
    assert blacklist.is_file
    assert (blacklist.user, blacklist.group, blacklist.mode) == ("root", "root", 0o644)
    lines = blacklist.content_string.splitlines()
    assert lines[0].startswith("# Managed by kubegpu (role nvidia_driver)")
    assert "blacklist nouveau" in lines
    assert "options nouveau modeset=0" in lines


def test_the_archive_components_come_from_our_deb822_sources(host) -> None:
    names = host.file("/etc/apt/sources.list.d").listdir()
    ours = [n for n in names if n.startswith("kubegpu-nvidia-distribution-")]
    if simulated_gpu(host) is None:
        assert ours == []
        return
    stanzas = [host.file(f"/etc/apt/sources.list.d/{n}").content_string for n in ours]
    suites = sorted(line for s in stanzas for line in s.splitlines() if line.startswith("Suites:"))
    assert suites == ["Suites: bookworm bookworm-updates", "Suites: bookworm-security"]
    for stanza in stanzas:
        assert "Components: contrib non-free non-free-firmware" in stanza.splitlines()


def test_the_persistence_daemon_is_enabled(host) -> None:
    if simulated_gpu(host) is None:
        assert not host.package("nvidia-persistenced").is_installed
        return
    # Enabled for the next boot; it cannot stay up without a loaded kernel module.
    assert host.service("nvidia-persistenced").is_enabled


def test_the_local_fact_records_the_installed_driver(host) -> None:
    fact_file = host.file(FACT)
    if simulated_gpu(host) is None:
        assert not fact_file.exists
        return
    fact = json.loads(fact_file.content_string)
    version = host.package("nvidia-driver").version.split("-")[0]
    assert fact["installed_version"] == version
    assert (fact["branch"], fact["source"], fact["build"]) == ("535", "distribution", "dkms")
    assert fact["packages"] == list(PACKAGES)
    assert fact["persistenced"] is True
    assert (fact["reboot_pending"], fact["reboot_reasons"]) == (False, [])


def test_nvidia_smi_says_the_kernel_module_is_missing_and_the_simulation_is_intact(host) -> None:
    gpu = simulated_gpu(host)
    if gpu is None:
        assert host.run("command -v nvidia-smi").rc != 0
        return
    real = host.run("nvidia-smi")
    assert real.rc == 9
    assert "couldn't communicate with the NVIDIA driver" in real.stdout + real.stderr
    # The SIMULATED GPU still answers from its own folder: the packages replaced nothing there.
    listing = host.check_output("%s -L", gpu["nvidia_smi"])
    assert listing.startswith("GPU 0: Tesla T4 (UUID: GPU-")
