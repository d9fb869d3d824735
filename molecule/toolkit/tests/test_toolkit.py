"""Verify of scenario toolkit: the NVIDIA container toolkit on every node, read from the node.

The packages come from the testbed's signed vendor repository (NVIDIA's programs built from
NVIDIA's Go module by the testbed, libnvidia-container as TEST DOUBLES, each saying which), at the
version the role pins by default, held, through a deb822 source signed by the keyring the role
put in place. That release ships NVIDIA's nvidia-cdi-refresh units: the .path unit is enabled
with the role's drop-in; neither node gets a spec (no driver, or a SIMULATED GPU that NVIDIA's
programs cannot see).
"""

from __future__ import annotations

from pathlib import Path

import yaml

ROLE = Path(__file__).resolve().parents[3] / "roles" / "nvidia_container_toolkit"
PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
SOURCE = "/etc/apt/sources.list.d/kubegpu-nvidia-container-toolkit.sources"
KEYRING = "/etc/apt/keyrings/kubegpu-nvidia-container-toolkit.gpg"
PIN = "/etc/apt/preferences.d/kubegpu-nvidia-container-toolkit"
CDI = "/etc/cdi/nvidia.yaml"


def default_version() -> str:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    return str(defaults["nvidia_container_toolkit_version"])


def test_the_packages_are_the_pinned_version_and_held(host) -> None:
    version = default_version()
    for name in PACKAGES:
        package = host.package(name)
        assert package.is_installed, name
        assert package.version == version, (name, package.version)
        assert host.check_output("dpkg-query -W -f='${db:Status-Want}' %s", name) == "hold"
    # The testbed's packages say what they are: built from NVIDIA's source, or a double.
    marker = host.file("/usr/share/doc/nvidia-container-toolkit/KUBEGPU-TESTBED-BUILD")
    assert "built by the kubegpu testbed from github.com/NVIDIA" in marker.content_string
    double = host.file("/usr/share/doc/libnvidia-container-tools/TEST-DOUBLE")
    assert "kubegpu TEST DOUBLE" in double.content_string
    first = host.check_output("nvidia-ctk --version").splitlines()[0]
    assert first == f"NVIDIA Container Toolkit CLI version {version.split('-')[0]}"


def test_the_repository_is_a_signed_deb822_source_and_the_version_is_pinned(host) -> None:
    repo_url = host.ansible.get_variables()["kubegpu_testbed_vendor_repo_url"]
    source = host.file(SOURCE).content_string.splitlines()
    assert f"URIs: {repo_url}/stable/deb/$(ARCH)" in source
    assert f"Signed-By: {KEYRING}" in source
    keyring = host.file(KEYRING)
    assert keyring.is_file and keyring.user == "root" and keyring.mode == 0o644
    # The keyring holds the key the repository is signed with: apt trusts its index.
    policy = host.check_output("apt-cache policy nvidia-container-toolkit")
    assert repo_url in policy
    pin = host.file(PIN).content_string.splitlines()
    assert f"Pin: version {default_version()}" in pin
    assert "Pin-Priority: 1001" in pin


def test_nvidias_cdi_refresh_keeps_the_spec_at_the_roles_path(host) -> None:
    dropin = host.file("/etc/systemd/system/nvidia-cdi-refresh.service.d/60-kubegpu.conf")
    assert f"Environment=NVIDIA_CTK_CDI_OUTPUT_FILE_PATH={CDI}" in dropin.content_string
    path_unit = host.service("nvidia-cdi-refresh.path")
    assert path_unit.is_enabled and path_unit.is_running
    # No driver here, and a SIMULATED GPU is invisible to NVIDIA's programs: no spec.
    assert not host.file(CDI).exists
