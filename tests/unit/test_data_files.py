"""data_files.fill: the tokens of the data files (module_utils/data/), table-driven."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import data_files

VALUES = {
    "name": "dcgm-exporter",
    "port": 9400,
    "labels": {"app": "x"},
    "on": True,
    "off": False,
    "empty": [],
    "none": None,
    "resource": "nvidia.com/gpu",
}

CASES: list[tuple[str, Any, Any]] = [
    ("a whole token keeps its type", {"port": "@@port@@"}, {"port": 9400}),
    ("a token inside a string is its text", {"listen": ":@@port@@"}, {"listen": ":9400"}),
    (
        "a token in a key is its text",
        {"@@resource@@": "0", "p@@port@@": 1},
        {"nvidia.com/gpu": "0", "p9400": 1},
    ),
    ("text without tokens stays", {"a": "@@", "b": 1, "c": None}, {"a": "@@", "b": 1, "c": None}),
    ("an optional value that is set", {"x": "@@?labels@@"}, {"x": {"app": "x"}}),
    (
        "an optional value that is empty or false is left out with its key",
        {"a": "@@?empty@@", "b": "@@?none@@", "c": "@@?off@@", "d": 1},
        {"d": 1},
    ),
    (
        "a conditional block's entries stand in its place",
        {"a": 1, "@@?on@@": {"b": "@@name@@", "c": 3}, "d": 4},
        {"a": 1, "b": "dcgm-exporter", "c": 3, "d": 4},
    ),
    ("a conditional block that is off", {"a": 1, "@@?off@@": {"b": 2}}, {"a": 1}),
    (
        "conditional list items stand in their place",
        [1, {"@@?on@@": [2, "@@port@@"]}, {"@@?off@@": [5]}, 6],
        [1, 2, 9400, 6],
    ),
    ("a one-key mapping without the marker is an item", [{"on": [1]}], [{"on": [1]}]),
]


@pytest.mark.parametrize(("data", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_fill(data: Any, expected: Any) -> None:
    assert data_files.fill(data, VALUES) == expected


def test_fill_keeps_the_order_of_keys_and_the_data_as_it_was() -> None:
    data = {"z": 1, "@@?on@@": {"y": 2, "a": 3}, "b": "@@?port@@", "c": 4}
    before = repr(data)
    assert list(data_files.fill(data, VALUES)) == ["z", "y", "a", "b", "c"]
    assert repr(data) == before


def test_a_whole_token_is_the_value_itself() -> None:
    # The DaemonSets' labels stand twice in one object (metadata and pod template), as one.
    out = data_files.fill({"a": "@@labels@@", "b": {"c": "@@labels@@"}}, VALUES)
    assert out["a"] is VALUES["labels"] and out["b"]["c"] is VALUES["labels"]


@pytest.mark.parametrize(
    "data", [{"a": "@@missing@@"}, {"a": "@@?missing@@"}, {"@@?missing@@": {}}, ["x@@missing@@"]]
)
def test_a_token_without_a_value_is_an_error(data: Any) -> None:
    with pytest.raises(KeyError, match="missing"):
        data_files.fill(data, VALUES)


def test_read_templates_reads_every_yaml_file_of_a_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "objects").mkdir()
    (tmp_path / "objects" / "a-service.yaml").write_text("kind: Service\nport: '@@port@@'\n")
    (tmp_path / "objects" / "b.yaml").write_text("- 1\n")
    (tmp_path / "objects" / "notes.md").write_text("not a template\n")
    monkeypatch.setattr(data_files, "DATA_DIR", str(tmp_path))
    assert data_files.read_templates("objects") == {
        "a-service": {"kind": "Service", "port": "@@port@@"},
        "b": [1],
    }


def test_read_templates_names_a_missing_folder() -> None:
    with pytest.raises(RuntimeError, match="no-such-folder"):
        data_files.read_templates("no-such-folder")
