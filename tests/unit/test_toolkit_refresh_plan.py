"""The toolkit read's plan for NVIDIA's CDI refresh units (module_utils
nvidia_container_toolkit_read.plan): where the toolkit ships nvidia-cdi-refresh.path, the role's
drop-in and the path unit's state decide whether tasks/cdi-refresh.yml has work; a converged node
is settled, so the role ends before it (tasks/cdi.yml). The read is the real one of a testbed node
(data/apt/SOURCES.md) with the refresh lines the script prints added."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import (
    nvidia_container_toolkit_read as ntr,
)

READ = (Path(__file__).parent / "data" / "apt" / "toolkit-read-debian12.txt").read_text()
DROPIN = (
    "# Managed by kubegpu (role nvidia_container_toolkit): where NVIDIA's CDI refresh writes the"
    " spec.\n[Service]\nEnvironment=NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/etc/cdi/nvidia.yaml\n"
)
OWN_DROPIN = f"refresh-dropin {hashlib.sha256(DROPIN.encode()).hexdigest()} 644 root root"
ARGS: dict[str, Any] = {
    "os_family": "Debian",
    "repo_manage": True,
    "packages": ["nvidia-container-toolkit"],
    "version": "1.18.0-1",
    "hold": True,
    "key_fingerprint": "",
    "key_file_sha256": "",
    "key_checksum": "",
    "source": {
        "name": "kubegpu-nvidia-container-toolkit",
        "types": ["deb"],
        "uris": ["https://example.invalid/deb/amd64"],
        "suites": ["/"],
        "components": [],
        "signed_by": "/etc/apt/keyrings/kubegpu-nvidia-container-toolkit.gpg",
    },
    "pin_content": "",
    "refresh_dropin_content": DROPIN,
}
REFRESH = {
    "settled": (["refresh-unit", "refresh-state enabled active", OWN_DROPIN], {}),
    "no_units": ([], {}),
    "no_units_dropin_left": ([OWN_DROPIN], {}),
    "dropin_missing": (["refresh-unit", "refresh-state enabled active"], {}),
    "dropin_other_text": (
        ["refresh-unit", "refresh-state enabled active", OWN_DROPIN.replace(" 644 ", " 600 ")],
        {},
    ),
    "dropin_other_env": (
        ["refresh-unit", "refresh-state enabled active", OWN_DROPIN],
        {"refresh_dropin_content": DROPIN + 'Environment="A=b"\n'},
    ),
    "path_disabled": (["refresh-unit", "refresh-state disabled inactive", OWN_DROPIN], {}),
    "path_stopped": (["refresh-unit", "refresh-state enabled inactive", OWN_DROPIN], {}),
    "path_state_unread": (["refresh-unit", "refresh-state  ", OWN_DROPIN], {}),
    "no_content_given": (
        ["refresh-unit", "refresh-state enabled active", OWN_DROPIN],
        {"refresh_dropin_content": None},
    ),
}
# (refresh_units, refresh_dropin_present, refresh_work, refresh_settled)
EXPECTED = {
    "settled": (True, True, False, True),
    "no_units": (False, False, False, False),
    "no_units_dropin_left": (False, True, False, False),
    "dropin_missing": (True, False, True, False),
    "dropin_other_text": (True, True, True, False),
    "dropin_other_env": (True, True, True, False),
    "path_disabled": (True, True, True, False),
    "path_stopped": (True, True, True, False),
    "path_state_unread": (True, True, True, False),
    "no_content_given": (True, True, True, False),
}


@pytest.mark.parametrize("case", sorted(REFRESH))
def test_the_refresh_fields_follow_the_read(case: str) -> None:
    lines, args = REFRESH[case]
    given = {**ARGS, **args}
    if given["refresh_dropin_content"] is None:
        del given["refresh_dropin_content"]
    plan = ntr.plan("\n".join([*READ.splitlines(), *lines]) + "\n", given)
    got = tuple(
        plan[key]
        for key in ("refresh_units", "refresh_dropin_present", "refresh_work", "refresh_settled")
    )
    assert got == EXPECTED[case]


def test_the_refresh_lines_leave_the_package_plan_alone() -> None:
    """The refresh lines carry prefixes the package rows and the other fields never match."""
    bare = ntr.plan(READ, ARGS)
    more = ntr.plan(READ + "\n".join(REFRESH["settled"][0]) + "\n", ARGS)
    for key in bare:
        if not key.startswith("refresh_"):
            assert more[key] == bare[key], key
