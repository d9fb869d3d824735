"""roles/cuda_toolkit never downloads NVIDIA's repository key unverified: run on its own (--tags
cuda) before the driver layer has added the repository, with no checksum of its own, it stops
before the first change. The role's install steps in check mode on localhost, with the
OS facts of the host under test (this machine is Debian; it has no CUDA repository)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.test_nvidia_driver_roles import (
    OS_FACTS,
    failure_message,
    host_results,
    pretend_os_task,
    run_playbook,
)

CASES = {
    # The driver role would add and verify the repository; run alone, it has not.
    "relies-on-driver": (
        {"nvidia_driver_source": "cuda_repo", "fake_os": OS_FACTS["debian12"]},
        "would be downloaded unverified",
    ),
    "own-checksum": (
        {
            "nvidia_driver_source": "distribution",
            "cuda_toolkit_cuda_repo_key_checksum": "sha256:" + "c" * 64,
            "fake_os": OS_FACTS["debian12"],
        },
        None,
    ),
    # The same on RHEL (install-RedHat.yml: rpm_key and a dnf repository).
    "rhel-relies-on-driver": (
        {"nvidia_driver_source": "cuda_repo", "fake_os": OS_FACTS["rhel9"]},
        "would be downloaded unverified",
    ),
    "rhel-own-checksum": (
        {
            "nvidia_driver_source": "distribution",
            "cuda_toolkit_cuda_repo_key_checksum": "sha256:" + "c" * 64,
            "fake_os": OS_FACTS["rhel9"],
        },
        None,
    ),
}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("cuda-key")
    hosts = {
        name: {
            "cuda_toolkit_enabled": True,
            "cuda_toolkit_source": "cuda_repo",
            "cuda_toolkit_version": "12.8",
            # A key URL on this machine: check mode's get_url asks for it, and nothing leaves.
            "cuda_toolkit_cuda_repo_url": "file:///nonexistent/kubegpu-test/cuda",
            "nvidia_driver_branch": "580",
            **settings,
        }
        for name, (settings, _) in CASES.items()
    }
    plays = []
    for family in ("Debian", "RedHat"):
        plays.append(
            {
                "name": f"Run the CUDA toolkit's {family} install steps in check mode",
                "hosts": "all",
                "gather_facts": False,
                "tasks": [
                    pretend_os_task(),
                    {
                        "name": "Validate",
                        "ansible.builtin.include_role": {
                            "name": "kubegpu.gpu.cuda_toolkit",
                            "tasks_from": "validate.yml",
                            "public": True,
                        },
                    },
                    {
                        "name": "Install",
                        "ansible.builtin.include_role": {
                            "name": "kubegpu.gpu.cuda_toolkit",
                            "tasks_from": f"install-{family}.yml",
                        },
                    },
                ],
            }
        )
    # One run per OS family (a play whose hosts all fail ends the run).
    found: dict[str, Any] = {"plays": []}
    for family, play in zip(("Debian", "RedHat"), plays, strict=True):
        mine = {k: v for k, v in hosts.items() if v["fake_os"]["os_family"] == family}
        (tmp / family).mkdir()
        _rc, report, _stderr = run_playbook(tmp / family, [play], mine, "--check")
        found["plays"] += report["plays"]
    return found


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_key_is_never_downloaded_unverified(case: str, report: dict[str, Any]) -> None:
    _settings, refusal = CASES[case]
    message = failure_message(report, case)
    ran = [name.split(" : ")[-1] for name, _ in host_results(report, case)]
    if refusal:
        assert message and refusal in message, message
        assert "cuda_toolkit_cuda_repo_key_checksum" in message
        assert "Create the directory for APT keyrings" not in ran
        assert "Download the repository's signing key, checking its checksum" not in ran
    else:
        assert "Check that the signing key about to be downloaded can be verified" in ran, ran
        assert message is None or "unverified" not in message, message
