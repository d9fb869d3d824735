"""Unit tests for plugins/module_utils/cdi_spec.py: reading CDI specs (YAML with and without
PyYAML, JSON) and what NVIDIA's device names stand for.

Inputs are real specs written by `nvidia-ctk cdi generate` (tests/unit/data/cdi/SOURCES.md); the
builtin YAML reader, which targets without PyYAML use, must give PyYAML's answer on each.
"""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest
import yaml
from ansible_collections.kubegpu.gpu.plugins.module_utils import cdi_spec as c

DATA = Path(__file__).parent / "data" / "cdi"
SPECS = sorted(DATA.glob("*.yaml"))


def assembled(names: list[str]) -> str:
    """The real spec head, then each name with the real device entry (as in
    test_node_readiness.cdi_spec)."""
    head = (DATA / "docker-buildx-3295-nvidia-ctk-575.57.08-spec-head.yaml").read_text()
    entry = (DATA / "nvidia-container-toolkit-314-device-entry-gpu0.yaml").read_text()
    devices = "".join(f'{entry}  name: "{n}"\n' for n in names)
    return f"{head}devices:\n{devices}kind: nvidia.com/gpu\n"


@pytest.fixture
def without_pyyaml(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def refuse(name: str, *args: object, **kwargs: object) -> object:
        if name == "yaml":
            raise ImportError("no PyYAML on this target")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", refuse)


def test_the_fixtures_are_there() -> None:
    assert len(SPECS) == 4


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_builtin_reader_matches_pyyaml_on_real_specs(path: Path) -> None:
    text = path.read_text()
    assert c.load_yaml_builtin(text, path.name) == yaml.safe_load(text)


def test_builtin_reader_matches_pyyaml_on_a_whole_spec() -> None:
    text = assembled(["0", "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c", "all"])
    data = c.load_yaml_builtin(text)
    assert data == yaml.safe_load(text)
    assert [d["name"] for d in data["devices"]] == [
        "0",
        "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c",
        "all",
    ]
    hooks = data["containerEdits"]["hooks"]
    assert hooks[0]["args"][-1] == "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so"
    assert data["devices"][0]["containerEdits"]["hooks"][0]["args"][4] == (
        "../card0::/dev/dri/by-path/pci-0000:07:00.0-card"
    )


@pytest.mark.parametrize("form", ["yaml", "json"])
@pytest.mark.parametrize("pyyaml", [True, False])
def test_read_spec_gives_kind_version_and_names(
    request: pytest.FixtureRequest, form: str, pyyaml: bool
) -> None:
    text = assembled(["0", "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c", "all"])
    if form == "json":
        text = json.dumps(yaml.safe_load(text))
    if not pyyaml:
        request.getfixturevalue("without_pyyaml")
    assert c.read_spec(text, "/etc/cdi/nvidia." + form) == {
        "kind": "nvidia.com/gpu",
        "cdi_version": "0.5.0",
        "devices": ["0", "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c", "all"],
    }


def test_read_spec_of_the_real_dgx_head_has_no_devices() -> None:
    text = (DATA / "nvidia-container-runtime-85-dgx-a100-460.91.03-spec-head.yaml").read_text()
    assert c.read_spec(text) == {"kind": "nvidia.com/gpu", "cdi_version": "0.4.0", "devices": []}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: nvidia.com/gpu\ndevices:\n\t- name: x\n", "line 3: a tab in the indentation"),
        ("kind: nvidia.com/gpu\ndevices: {a: b}\n", "line 2: YAML this reader does not take"),
        ("kind: nvidia.com/gpu\nkind: other\n", "line 2: key 'kind' appears twice"),
        ("kind: nvidia.com/gpu\n  devices: []\n", "line 2: unexpected indentation"),
        ("kind: nvidia.com/gpu\ndevices: &a\n", "line 2: YAML this reader does not take"),
        ('kind: "nvidia.com/gpu\n', "line 1: unreadable double-quoted string"),
        ("- a\n- b\n", "a CDI spec is a mapping"),
        ("cdiVersion: 0.5.0\ndevices: []\n", "no `kind`"),
        ("kind: nvidia.com/gpu\ndevices:\n- containerEdits: {}\n", "device 0 has no name"),
        ("kind: nvidia.com/gpu\ndevices: x\n", "`devices` is not a list"),
    ],
)
def test_builtin_reader_refuses_with_the_place(
    without_pyyaml: None, text: str, message: str
) -> None:
    with pytest.raises(c.CdiSpecError, match=r"^/etc/cdi/x\.yaml") as exc:
        c.read_spec(text, "/etc/cdi/x.yaml")
    assert message in str(exc.value)


def test_json_and_pyyaml_errors_name_the_file() -> None:
    with pytest.raises(c.CdiSpecError, match=r"^/var/run/cdi/n\.json: not valid JSON"):
        c.read_spec('{"kind": ', "/var/run/cdi/n.json")
    with pytest.raises(c.CdiSpecError, match=r"^/etc/cdi/n\.yaml: not valid YAML"):
        c.read_spec("kind: [a\n", "/etc/cdi/n.yaml")


def test_real_device_names_of_an_8_gpu_machine() -> None:
    lines = (DATA / "nvidia-container-toolkit-314-device-names-8gpu.txt").read_text().splitlines()
    names = [line.split(":", 1)[1].strip().strip('"') for line in lines]
    kinds = [c.name_kind(n) for n in names]
    assert [k for k in kinds if k[0] == "gpu-index"] == [("gpu-index", i) for i in range(8)]
    assert [k[1] for k in kinds if k[0] == "gpu-uuid"] == names[1:16:2]
    assert kinds[-1] == ("all", None)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("gpu3", ("gpu-index", 3)),
        ("1:6", ("mig-index", (1, 6))),
        ("mig0:2", ("mig-index", (0, 2))),
        ("MIG-GPU-27b94a00-ed54-5c24-b1fd-1054085de32a/1/0", None),
        ("MIG-4f9bbd4c-4e40-5a1f-9c7d-3c2f7d6b4e11", None),
        ("GPU-4cf8db2d", ("other", "GPU-4cf8db2d")),
        ("imex0", ("other", "imex0")),
    ],
)
def test_name_kinds(name: str, kind: tuple | None) -> None:
    assert c.name_kind(name) == (kind or ("mig-uuid", name))


@pytest.mark.parametrize(
    "relpath", ["plugins/module_utils/cdi_spec.py", "plugins/module_utils/node_readiness.py"]
)
def test_target_code_is_python_3_8_syntax(repo_root: Path, relpath: str) -> None:
    import ast

    ast.parse((repo_root / relpath).read_text(), filename=relpath, feature_version=(3, 8))
