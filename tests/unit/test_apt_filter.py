"""kubegpu.gpu.deb822_source: the text of a deb822 source, byte for byte what
ansible.builtin.deb822_repository writes for the same options, so that the roles can write their
sources with kubegpu.gpu.file_set and leave a source the builtin module wrote as it is.

The builtin module runs for real here (check mode, which returns the text it would write and
touches nothing), next to the filter, on the option sets the roles use; and on the texts the
builtin module wrote on a testbed node (Debian 12) before the roles moved to the filter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.kubegpu.gpu.plugins.filter import apt

from tests.unit.test_nvidia_driver_roles import host_results, run_playbook

deb822_source = apt.FilterModule().filters()["deb822_source"]

# The option sets the roles pass: the driver's archive components (distribution), NVIDIA's
# flat repository (cuda_repo), a mirror with suites and components, the toolkit's repository.
CASES: list[dict[str, Any]] = [
    {
        "name": "kubegpu-nvidia-distribution-ef5c2992",
        "types": ["deb"],
        "uris": ["http://archive.example/debian/"],
        "suites": ["bookworm", "bookworm-updates"],
        "components": ["contrib", "non-free", "non-free-firmware"],
        "signed_by": "/usr/share/keyrings/debian-archive-keyring.gpg",
    },
    {
        "name": "kubegpu-nvidia-cuda",
        "types": ["deb"],
        "uris": ["https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"],
        "suites": ["/"],
        "signed_by": "/etc/apt/keyrings/kubegpu-nvidia-cuda.gpg",
    },
    {
        "name": "kubegpu-nvidia-mirror",
        "types": ["deb"],
        "uris": ["file:///srv/mirror/nvidia"],
        "suites": ["bookworm", "stable"],
        "components": ["main"],
        "signed_by": "/etc/apt/keyrings/kubegpu-nvidia-mirror.asc",
    },
    {
        "name": "kubegpu-nvidia-container-toolkit",
        "types": ["deb"],
        "uris": ["https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"],
        "suites": ["/"],
        "signed_by": "/etc/apt/keyrings/kubegpu-nvidia-container-toolkit.gpg",
    },
]


def test_the_text_is_what_the_builtin_module_writes_for_the_same_options(
    tmp_path: Path,
) -> None:
    play = [
        {
            "name": "deb822",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "name": f"builtin {i}",
                    "ansible.builtin.deb822_repository": {**case, "mode": "0644"},
                    "check_mode": True,
                }
                for i, case in enumerate(CASES)
            ],
        }
    ]
    rc, report, stderr = run_playbook(tmp_path, play, {"h1": {}})
    assert rc == 0, stderr
    results = host_results(report, "h1")
    assert len(results) == len(CASES), results
    for case, (_, result) in zip(CASES, results, strict=True):
        assert result["repo"], result
        assert deb822_source(case) == result["repo"], case["name"]


def test_the_texts_the_builtin_module_wrote_on_a_testbed_node_stay_the_same() -> None:
    # cat -A of /etc/apt/sources.list.d/ on a converged Debian 12 testbed node (2026-12-02),
    # written by ansible.builtin.deb822_repository under the roles before this filter; the
    # archive's host name is replaced by archive.example (no registry host names in our files).
    assert deb822_source(CASES[0]) == (
        "Components: contrib non-free non-free-firmware\n"
        "X-Repolib-Name: kubegpu-nvidia-distribution-ef5c2992\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        "Suites: bookworm bookworm-updates\n"
        "Types: deb\n"
        "URIs: http://archive.example/debian/\n"
    )
    toolkit = dict(CASES[3], uris=["http://10.213.3.1:8231/libnvidia-container/stable/deb/$(ARCH)"])
    assert deb822_source(toolkit) == (
        "X-Repolib-Name: kubegpu-nvidia-container-toolkit\n"
        "Signed-By: /etc/apt/keyrings/kubegpu-nvidia-container-toolkit.gpg\n"
        "Suites: /\n"
        "Types: deb\n"
        "URIs: http://10.213.3.1:8231/libnvidia-container/stable/deb/$(ARCH)\n"
    )


def test_empty_lists_and_none_are_left_out_and_booleans_read_yes_no() -> None:
    text = deb822_source(dict(CASES[1], components=[], architectures=None, enabled=False))
    assert "Components" not in text
    assert "Architectures" not in text
    assert text.startswith("Enabled: no\n")


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ("deb", ["mapping", "str"]),
        (dict(CASES[1], signed_by_url="x"), ["unknown option", "signed_by_url", "allowed"]),
        ({k: v for k, v in CASES[1].items() if k != "uris"}, ["uris", "must be given"]),
        (dict(CASES[1], suites=[]), ["suites", "must be given"]),
        (dict(CASES[1], name="Kubegpu CUDA"), ["name", "lower-case"]),
        (dict(CASES[1], suites="bookworm"), ["suites", "list of strings"]),
        (dict(CASES[1], enabled="yes"), ["enabled", "true or false"]),
        (dict(CASES[1], signed_by="-----BEGIN PGP\nabc"), ["signed_by", "line break"]),
    ],
)
def test_bad_options_are_refused_naming_the_option(options: Any, words: list[str]) -> None:
    with pytest.raises(AnsibleFilterError) as err:
        deb822_source(options)
    for word in words:
        assert word in str(err.value)
