"""The systemd_units filter, on real `systemctl show` outputs of a testbed node."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.kubegpu.gpu.plugins.filter import units

DATA = Path(__file__).parent / "data" / "systemd"
systemd_units = units.FilterModule().filters()["systemd_units"]


def test_each_unit_asked_for_is_there_by_id_with_its_properties() -> None:
    found = systemd_units((DATA / "show-runtime-and-nvidia-units-debian12.txt").read_text())
    assert list(found) == [
        "crio.service",
        "containerd.service",
        "docker.service",
        "nvidia-persistenced.service",
        "nvidia-fabricmanager.service",
    ]
    assert found["containerd.service"] == {
        "Id": "containerd.service",
        "LoadState": "loaded",
        "ActiveState": "active",
        "UnitFileState": "enabled",
    }
    assert found["crio.service"]["LoadState"] == "not-found"
    assert found["crio.service"]["UnitFileState"] == ""
    assert found["nvidia-persistenced.service"]["ActiveState"] == "failed"


def test_a_masked_unit_reads_as_masked() -> None:
    found = systemd_units((DATA / "show-masked-unit-debian12.txt").read_text())
    assert found == {
        "docker.service": {
            "Id": "docker.service",
            "LoadState": "masked",
            "ActiveState": "inactive",
            "UnitFileState": "masked",
        }
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("LoadState=loaded\n", {}),
        ("Id=a.service\nDescription=x=y\n\n\nId=b.service\n", {"a.service", "b.service"}),
        ("Id=a.service\r\nLoadState=loaded\r\n\r\nId=b.service\r\n", {"a.service", "b.service"}),
    ],
)
def test_blocks_without_an_id_are_left_out_and_values_keep_their_equals_signs(
    text: str, expected: object
) -> None:
    found = systemd_units(text)
    assert (found if expected == {} else set(found)) == expected
    if "Description" in text:
        assert found["a.service"]["Description"] == "x=y"


def test_anything_but_text_is_refused_with_what_was_given() -> None:
    with pytest.raises(AnsibleFilterError, match="not a list"):
        systemd_units(["Id=a.service"])
