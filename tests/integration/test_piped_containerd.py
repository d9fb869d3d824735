"""containerd_runtime's action plugin: with pipelining, a run with nothing to change is answered
from two sh scripts and the module's plan on the controller; everything else runs the module.
Both ways must return the same.

Real `ansible localhost -c local` runs against the real containerd of this machine, on configs
under tmp_path (as tests/integration/test_containerd_host.py does). Each case runs once with
`ansible_pipelining=true` and once with false. The piped runs of the cases that must be
answered without the module get a host whose Python does not exist, so a piped run that fell
back to the module fails; the cases that must fall back keep it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_containerd_host import (
    DEBIAN_PACKAGE_CONFIG,
    args_for,
    own_scratch_root,
)
from tests.unit.test_piped_facts import adhoc, both_ways, comparable

pytestmark = pytest.mark.integration

ANSWERED = ["debian-from-path", "minimal", "dotfile-and-stray", "version-1"]
MODULE_RUNS = ["check-change", "other-folder", "broken", "no-containerd", "absent"]
# A file that containerd loads through the *.toml glob: Go's filepath.Match lets * match a
# leading dot, and the script must list it for the plan to come out the same.
DOTFILE = (
    'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  max_container_log_line_size = 8192\n'
)


def scratch_folders() -> set[str]:
    return {str(p) for p in Path(tempfile.gettempdir()).glob("kubegpu-containerd-*")}


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    containerd = shutil.which("containerd")
    if not containerd or not shutil.which("ctr"):
        pytest.fail("containerd and ctr are needed on this machine: apt-get install containerd")
    tmp = tmp_path_factory.mktemp("piped-containerd")

    def etc(name: str, main: str | None) -> Path:
        folder = tmp / name / "etc" / "containerd"
        folder.mkdir(parents=True)
        if main is not None:
            (folder / "config.toml").write_text(main)
        return folder

    debian = DEBIAN_PACKAGE_CONFIG.read_text()
    args: dict[str, dict[str, Any]] = {}
    found = args_for(etc("debian-from-path", debian), containerd)
    del found["containerd_binary"]  # found as the module finds it: /usr/local/bin, /usr/bin, PATH
    args["debian-from-path"] = found
    args["minimal"] = args_for(etc("minimal", None), containerd)
    dotted = etc("dotfile-and-stray", debian)
    (dotted / "conf.d").mkdir()
    (dotted / "conf.d" / ".50-extra.toml").write_text(DOTFILE)
    args["dotfile-and-stray"] = args_for(dotted, containerd)
    args["version-1"] = args_for(etc("version-1", "oom_score = 0\n"), containerd)
    args["check-change"] = args_for(etc("check-change", debian), containerd)
    # An import from a folder the script does not list: the module answers.
    other = etc("other-folder", None)
    (other / "elsewhere").mkdir()
    imports = 'version = 2\nimports = ["%s"]\n' % (other / "elsewhere" / "*.toml")
    (other / "config.toml").write_text(debian.replace("version = 2\n", imports))
    args["other-folder"] = args_for(other, containerd)
    args["broken"] = args_for(
        etc("broken", 'version = 2\n[plugins."io.containerd.grpc.v1.cri"\n'), containerd
    )
    args["no-containerd"] = dict(
        args_for(etc("no-containerd", debian), containerd),
        containerd_binary=str(tmp / "no" / "containerd"),
    )
    args["absent"] = dict(args_for(etc("absent", debian), containerd), state="absent")

    # The cases that must find nothing to change, and two that fall back, first written by the
    # module (the first converge); the stray drop-in comes after, as nvidia-ctk 1.18.0 left one.
    for name in [*ANSWERED, "other-folder", "absent"]:
        done = adhoc(
            tmp / f"{name}-write", "containerd_runtime", args[name] | {"state": "present"}, False
        )
        assert done["rc"] == 0 and done["result"]["changed"], done
    (dotted / "config.d").mkdir()
    (dotted / "config.d" / "99-nvidia.toml").write_text("version = 2\n")

    # Scratch folders in a TMPDIR of these runs' own: none of another pytest-xdist worker's.
    with own_scratch_root(tmp_path_factory):
        before = scratch_folders()
        check = ("--check", "--diff")
        runs = both_ways(
            tmp,
            "containerd_runtime",
            args,
            module_runs=tuple(MODULE_RUNS),
            flags={"check-change": check, "absent": check},
        )
        return {"runs": runs, "left": scratch_folders() - before}


@pytest.mark.parametrize("case", ANSWERED + MODULE_RUNS)
def test_piped_equals_the_module(cases: dict[str, Any], case: str) -> None:
    piped, module = cases["runs"][case][True], cases["runs"][case][False]
    assert piped["rc"] == module["rc"], (piped, module)
    assert comparable(piped["result"]) == comparable(module["result"])


def test_the_cases_say_what_they_should(cases: dict[str, Any]) -> None:
    runs = cases["runs"]
    for name in ANSWERED:
        result = runs[name][True]["result"]
        assert result["changed"] is False and result["validation"]["dump"] == "not run", name
        # A host without Python answered it: the module did not run.
        assert "no-such-python" not in json.dumps(result), name
    assert runs["debian-from-path"][True]["result"]["containerd_version"].startswith("1.")
    assert runs["version-1"][True]["result"]["schema"]["config_version"] == 1
    stray = runs["dotfile-and-stray"][True]["result"]["warnings"]
    assert any("config.d/99-nvidia.toml is not imported" in w for w in stray), stray
    checked = runs["check-change"][True]["result"]
    assert checked["changed"] is True and checked["validation"]["dump"] == "ok"
    assert len(checked["diff"]) == 2
    assert runs["other-folder"][True]["result"]["changed"] is False
    assert "containerd cannot load the configuration" in runs["broken"][True]["result"]["msg"]
    assert "not installed" in runs["no-containerd"][True]["result"]["msg"]
    assert runs["absent"][True]["result"]["removal"]["drop_in"] == "removed"


def test_the_scratch_folders_are_removed(cases: dict[str, Any]) -> None:
    assert cases["left"] == set()
