"""The container toolkit's repository key is never trusted unpinned (roles/nvidia_container_toolkit,
tasks/validate.yml and vars/main.yml): NVIDIA's own key is pinned by its fingerprint by default,
and a key downloaded from any other URL needs a fingerprint or a checksum before any host
changes. The role's read-only validation, run by ansible-playbook on localhost (this machine is
Debian, so the role's APT read runs for real: it only reads)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.test_nvidia_driver_roles import failure_message, host_results, run_playbook

NVIDIA_KEY_FINGERPRINT = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"
MIRROR_KEY = "https://mirror.example.test/libnvidia-container/gpgkey"

CASES: dict[str, tuple[dict[str, Any], str | None, str]] = {
    # name: (settings, the refusal's words or None, the fingerprint the key must have)
    "nvidia-default": ({}, None, NVIDIA_KEY_FINGERPRINT),
    "mirror-unpinned": (
        {"nvidia_container_toolkit_repo_key_url": MIRROR_KEY},
        "with nothing to check it against",
        "",
    ),
    "mirror-checksum": (
        {
            "nvidia_container_toolkit_repo_key_url": MIRROR_KEY,
            "nvidia_container_toolkit_repo_key_checksum": "sha256:" + "ab" * 32,
        },
        None,
        "",
    ),
    "mirror-fingerprint": (
        {
            "nvidia_container_toolkit_repo_key_url": MIRROR_KEY,
            "nvidia_container_toolkit_repo_key_fingerprint": "0123 4567 89AB CDEF 0123"
            " 4567 89AB CDEF 0123 4567",
        },
        None,
        "0123 4567 89AB CDEF 0123 4567 89AB CDEF 0123 4567",
    ),
}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("toolkit-key")
    play = [
        {
            "name": "Validate the toolkit role's settings",
            "hosts": "all",
            "gather_facts": True,
            "gather_subset": ["!all", "!min", "distribution", "os_family"],
            "tasks": [
                {
                    "name": "Validate",
                    "ansible.builtin.include_role": {
                        "name": "kubegpu.gpu.nvidia_container_toolkit",
                        "tasks_from": "validate.yml",
                        "public": True,
                    },
                },
                {
                    "name": "Report the key's pin",
                    "ansible.builtin.debug": {
                        "msg": "{{ __nvidia_container_toolkit_key_fingerprint }}"
                    },
                },
            ],
        }
    ]
    hosts = {name: settings for name, (settings, _, _) in CASES.items()}
    _rc, found, _stderr = run_playbook(tmp, play, hosts, "--check")
    return found


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_downloaded_key_is_never_trusted_unpinned(case: str, report: dict[str, Any]) -> None:
    _settings, refusal, fingerprint = CASES[case]
    message = failure_message(report, case)
    if refusal:
        assert message and refusal in message, message
        assert "nvidia_container_toolkit_repo_key_fingerprint" in message
        assert "nvidia_container_toolkit_repo_key_checksum" in message
        assert MIRROR_KEY in message
    else:
        assert message is None, message
        results = dict(host_results(report, case))
        assert results["Report the key's pin"]["msg"] == fingerprint
