"""Verify of scenario toolkit: the NVIDIA container toolkit on every node, read from the node.

The packages come from the testbed's signed vendor repository (TEST DOUBLES that say so), at
the version the role pins by default, held, through a deb822 source signed by the keyring the
role put in place. The CDI spec exists only where nvidia-smi answered: on the node with the
SIMULATED GPU, describing that GPU; the GPU-less node has none.
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
    # The testbed's packages are stand-ins, and say so.
    marker = host.file("/usr/share/doc/nvidia-container-toolkit/TEST-DOUBLE")
    assert "kubegpu TEST DOUBLE" in marker.content_string


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


def test_the_cdi_spec_describes_the_gpu_nvidia_smi_reports(host) -> None:
    gpu = host.ansible.get_variables().get("kubegpu_testbed_simulated_gpu")
    spec_file = host.file(CDI)
    if gpu is None:
        assert not spec_file.exists  # no working nvidia-smi: no spec
        return
    spec = yaml.safe_load(spec_file.content_string)
    assert spec["kind"] == "nvidia.com/gpu"
    # Written by the toolkit's TEST DOUBLE of nvidia-ctk from the SIMULATED GPU, and marked so.
    assert spec["annotations"]["kubegpu.io/simulated"] == "true"
    listing = host.check_output("%s -L", gpu["nvidia_smi"])
    uuid = listing.split("UUID: ")[1].rstrip(")")
    assert {d["name"] for d in spec["devices"]} == {"0", uuid, "all"}
