"""module_utils/container_runtime_read.py: which runtime the container_runtime role wires, and
whether it installs containerd first, from what its read printed (systemctl show of the three
runtimes' units, then dpkg-query rows of containerd's packages after a "#dpkg" line)."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import container_runtime_read as crr

SERVICES = {"containerd": "containerd", "docker": "docker", "crio": "crio"}
ORDER = ["crio", "containerd", "docker"]


def units(**states: tuple[str, str, str]) -> str:
    blocks = []
    for name in ("crio", "containerd", "docker"):
        load, enabled, active = states.get(name, ("not-found", "", "inactive"))
        blocks.append(
            f"Id={name}.service\nLoadState={load}\nUnitFileState={enabled}\nActiveState={active}"
        )
    return "\n\n".join(blocks)


def decide(stdout: str, **args: Any) -> dict[str, Any]:
    settings = {
        "requested": "auto",
        "install": False,
        "packages": ["containerd"],
        "services": SERVICES,
        "detect_order": ORDER,
        **args,
    }
    return crr.plan(stdout, settings)


RUNNING = ("loaded", "enabled", "active")


def test_auto_takes_the_first_runtime_found_in_order() -> None:
    both = units(containerd=RUNNING, docker=RUNNING)
    assert decide(both)["type"] == "containerd"
    assert decide(units(crio=RUNNING, containerd=RUNNING))["type"] == "crio"
    # A masked unit counts as present (LoadState masked is not not-found).
    assert decide(units(docker=("masked", "masked", "inactive")))["type"] == "docker"


def test_nothing_found_is_none_or_containerd_to_install() -> None:
    nothing = units() + "\n\n#dpkg\ncontainerd un "
    assert decide(nothing)["type"] == "none"
    planned = decide(nothing, install=True)
    assert planned["type"] == "containerd"
    assert planned["missing"] == planned["unsettled"] == ["containerd"]
    assert planned["install_work"] is True


def test_an_asked_for_runtime_is_taken_as_asked_and_said_present_or_not() -> None:
    found = decide(units(containerd=RUNNING), requested="docker")
    assert found["type"] == "docker"
    assert found["present"] is False
    assert decide(units(docker=RUNNING), requested="docker")["present"] is True
    assert decide(units(docker=RUNNING))["present"] is False  # auto names no unit


@pytest.mark.parametrize(
    ("containerd", "rows", "work", "missing", "unsettled"),
    [
        (RUNNING, "containerd ii ", False, [], []),
        (("loaded", "disabled", "active"), "containerd ii ", True, [], []),
        (("loaded", "enabled", "failed"), "containerd ii ", True, [], []),
        (RUNNING, "containerd iU ", True, [], ["containerd"]),
        (RUNNING, "containerd rc ", True, ["containerd"], ["containerd"]),
        # A unit with no trace of the package in dpkg: another containerd, left alone (below).
        (RUNNING, "", False, [], []),
    ],
    ids=["settled", "disabled", "failed", "half-installed", "config-files", "unknown"],
)
def test_containerd_is_installed_first_where_it_is_not_settled(
    containerd: tuple[str, str, str],
    rows: str,
    work: bool,
    missing: list[str],
    unsettled: list[str],
) -> None:
    planned = decide(units(containerd=containerd) + "\n\n#dpkg\n" + rows, install=True)
    assert planned["install_work"] is work
    assert planned["missing"] == missing
    assert planned["unsettled"] == unsettled
    # Without container_runtime_install nothing is installed, and no package is asked about.
    quiet = decide(units(containerd=containerd) + "\n\n#dpkg\n" + rows)
    assert quiet["install_work"] is False
    assert quiet["missing"] == quiet["unsettled"] == []


def test_an_os_without_a_containerd_package_goes_to_the_install_step_without_containerd() -> None:
    # The install step then says that the distribution has no containerd package.
    planned = decide(units(), install=True, packages=[])
    assert planned["type"] == "containerd" and planned["install_work"] is True
    # A containerd that is there (from elsewhere) is wired as it is.
    planned = decide(units(containerd=RUNNING), install=True, packages=[])
    assert planned["foreign_containerd"] is True and planned["install_work"] is False


def test_missing_arguments_are_named() -> None:
    with pytest.raises(crr.RuntimePlanError, match="plan_args lacks services, detect_order"):
        crr.plan("", {"requested": "auto", "install": False, "packages": []})


def test_a_containerd_no_distribution_package_brought_is_left_as_it_is() -> None:
    # Docker's containerd.io conflicts with Debian's containerd and runc: installing them over it
    # would remove it. containerd.io's unit is there, and dpkg knows none of Debian's packages.
    docker_ce = units(containerd=RUNNING) + "\n\n#dpkg\n"
    planned = decide(docker_ce, install=True, packages=["containerd", "runc"])
    assert planned["type"] == "containerd"
    assert planned["foreign_containerd"] is True
    assert planned["missing"] == planned["unsettled"] == []
    assert planned["install_work"] is False
    # Debian's containerd with runc missing is the distribution's: runc is installed.
    half = units(containerd=RUNNING) + "\n\n#dpkg\ncontainerd ii \nrunc un "
    planned = decide(half, install=True, packages=["containerd", "runc"])
    assert planned["foreign_containerd"] is False
    assert planned["missing"] == ["runc"] and planned["install_work"] is True
    # No unit at all: installed, as before.
    nothing = units() + "\n\n#dpkg\ncontainerd un \nrunc un "
    planned = decide(nothing, install=True, packages=["containerd", "runc"])
    assert planned["foreign_containerd"] is False and planned["install_work"] is True
