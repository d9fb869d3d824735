"""MIG layouts: the parsers on real `nvidia-smi mig` captures, layout names, validation and the
planner (idempotent: nothing to do when the state already matches)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import mig_layout as mig

DATA = Path(__file__).resolve().parent / "data" / "mig"
# The ones the SIMULATED GPU replays ship in the package.
PACKAGED = Path(__file__).resolve().parents[2] / "src" / "kubegpu" / "captures" / "nvidia-smi-mig"


def read(name: str) -> str:
    path = DATA / name
    if not path.exists():
        path = PACKAGED / name
    return path.read_text(encoding="utf-8")


def test_every_capture_has_a_source_row_and_is_parsed_here() -> None:
    sources = read("SOURCES.md")
    names = sorted(p.name for p in DATA.iterdir() if p.name != "SOURCES.md")
    assert names, "no captures"
    for name in names:
        assert f"| {name} |" in sources, name
        assert name in Path(__file__).read_text(), f"{name} is not used by a test"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "a100-sxm4-40gb-lgip.txt",
            [
                ("1g.5gb", 19, 7, 7, 1),
                ("1g.5gb+me", 20, 1, 1, 1),
                ("1g.10gb", 15, 4, 4, 1),
                ("2g.10gb", 14, 3, 3, 2),
                ("3g.20gb", 9, 2, 2, 3),
                ("4g.20gb", 5, 1, 1, 4),
                ("7g.40gb", 0, 1, 1, 7),
            ],
        ),
        (
            "scaleway-h100-pcie-525-lgip.txt",
            [
                ("1g.10gb", 19, 7, 7, 1),
                ("1g.10gb+me", 20, 1, 1, 1),
                ("1g.20gb", 15, 4, 4, 1),
                ("2g.20gb", 14, 3, 3, 2),
                ("3g.40gb", 9, 2, 2, 3),
                ("4g.40gb", 5, 1, 1, 4),
                ("7g.80gb", 0, 1, 1, 7),
            ],
        ),
        (
            "a30-24gb-lgip-all-used.txt",
            [
                ("1g.6gb", 14, 0, 4, 1),
                ("1g.6gb+me", 21, 0, 1, 1),
                ("2g.12gb", 5, 0, 2, 2),
                ("4g.24gb", 0, 0, 1, 4),
            ],
        ),
    ],
)
def test_parse_gi_profiles(name: str, expected: list[tuple[str, int, int, int, int]]) -> None:
    parsed = mig.parse_gi_profiles(read(name))
    assert list(parsed) == [0]
    assert [(p["name"], p["id"], p["free"], p["total"], p["slices"]) for p in parsed[0]] == expected


def test_parse_gi_profiles_memory_and_sm() -> None:
    seven = mig.parse_gi_profiles(read("scaleway-h100-pcie-525-lgip.txt"))[0][-1]
    assert seven["memory_gib"] == 79.0 and seven["sm"] == 114 and seven["p2p"] == "No"


def test_parse_gi_placements() -> None:
    h100 = mig.parse_gi_placements(read("scaleway-h100-pcie-525-lgipp.txt"))[0]
    assert h100[19] == {"starts": [0, 1, 2, 3, 4, 5, 6], "size": 1}
    assert h100[15] == {"starts": [0, 2, 4, 6], "size": 2}
    assert h100[9] == {"starts": [0, 4], "size": 4}
    assert h100[0] == {"starts": [0], "size": 8}  # "Placement :" (one placement)
    a30 = mig.parse_gi_placements(read("a30-24gb-lgipp.txt"))[0]
    assert a30 == {
        14: {"starts": [0, 1, 2, 3], "size": 1},
        21: {"starts": [0, 1, 2, 3], "size": 1},
        5: {"starts": [0, 2], "size": 2},
        0: {"starts": [0], "size": 4},
    }


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a100-sxm4-40gb-lgi-2x3g20gb.txt", [("3g.20gb", 9, 1, 4, 4), ("3g.20gb", 9, 2, 0, 4)]),
        (
            "a100-sxm4-40gb-lgi-7x1g5gb.txt",
            [("1g.5gb", 19, gi, gi - 7, 1) for gi in range(7, 14)],
        ),
        ("a30-24gb-lgi-4x1g6gb.txt", [("1g.6gb", 14, gi, gi - 3, 1) for gi in range(3, 7)]),
        (
            "h100-pcie-525-lgi-3g40gb-3x1g10gb.txt",
            [
                ("1g.10gb", 19, 7, 0, 1),
                ("1g.10gb", 19, 8, 1, 1),
                ("1g.10gb", 19, 9, 2, 1),
                ("3g.40gb", 9, 2, 4, 4),
            ],
        ),
    ],
)
def test_parse_gpu_instances(name: str, expected: list[tuple[str, int, int, int, int]]) -> None:
    rows = mig.parse_gpu_instances(read(name))
    assert [(r["name"], r["profile_id"], r["gi"], r["start"], r["size"]) for r in rows] == expected
    assert {r["gpu"] for r in rows} == {0}


def test_parse_compute_instances_both_layouts() -> None:
    # The -lci layout with the Placement column (R470+) and without it (R450).
    with_placement = (
        "| GPU     GPU       Name             Profile   Instance   Placement  |\n"
        "|   0      7       MIG 1g.10gb          0         0          0:1     |\n"
        "|   0      2       MIG 3g.40gb          2         0          0:4     |\n"
    )
    without = "|   0      1       MIG 1c.3g.20gb       0         1     |\n"
    assert [(r["gi"], r["name"], r["ci"]) for r in mig.parse_compute_instances(with_placement)] == [
        (7, "1g.10gb", 0),
        (2, "3g.40gb", 0),
    ]
    assert [(r["gi"], r["name"], r["ci"]) for r in mig.parse_compute_instances(without)] == [
        (1, "1c.3g.20gb", 1)
    ]


def test_nothing_listed_parses_as_empty() -> None:
    for text in ("No GPU instances found: Not Found\n", "", None):
        assert mig.parse_gpu_instances(text) == []
        assert mig.parse_gi_profiles(text) == {}


def _profiles(name: str) -> dict[int, list[dict[str, object]]]:
    return mig.parse_gi_profiles(read(name))


H100 = "scaleway-h100-pcie-525-lgip.txt"
A100 = "a100-sxm4-40gb-lgip.txt"


def test_all_profile_layout_takes_the_most_the_gpu_offers() -> None:
    wanted = mig.resolve_layout("all-1g.10gb", {}, [0], _profiles(H100))
    assert wanted == {0: {"mig_enabled": True, "mig_devices": {"1g.10gb": 7}}}
    me = mig.resolve_layout("all-1g.5gb.me", {}, [0], _profiles(A100))
    assert me[0]["mig_devices"] == {"1g.5gb+me": 1}


@pytest.mark.parametrize(
    ("capture", "expected"),
    [
        (H100, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
        (A100, {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),
        ("a30-24gb-lgip-all-used.txt", {"1g.6gb": 2, "2g.12gb": 1}),
    ],
)
def test_all_balanced_per_gpu_model(capture: str, expected: dict[str, int]) -> None:
    # The same figures as mig-parted's all-balanced for H100-80GB, A100-40GB and A30-24GB.
    wanted = mig.resolve_layout("all-balanced", {}, [0], _profiles(capture))
    assert wanted[0]["mig_devices"] == expected
    assert mig.validate(wanted, _profiles(capture), {}, {0: "x"}, "all-balanced") == []


def test_custom_layout_per_gpu() -> None:
    custom = {
        "mixed": [
            {"devices": [0], "mig_enabled": True, "mig_devices": {"3g.40gb": 2}},
            {"devices": [1], "mig_enabled": False},
        ]
    }
    profiles = {0: _profiles(H100)[0], 1: _profiles(H100)[0]}
    wanted = mig.resolve_layout("mixed", custom, [0, 1, 2], profiles)
    assert wanted[0] == {"mig_enabled": True, "mig_devices": {"3g.40gb": 2}}
    assert wanted[1] == {"mig_enabled": False, "mig_devices": {}}
    assert wanted[2] is None  # not named: left alone


@pytest.mark.parametrize(
    ("name", "custom", "message"),
    [
        ("all-whatever", {}, "unknown MIG layout 'all-whatever'; known: all-disabled"),
        ("two", {"two": [{"devices": [5]}]}, "names GPU 5, but this host has GPUs [0]"),
        ("dup", {"dup": [{"devices": "all"}, {"devices": [0]}]}, "names GPU 0 in two entries"),
        (
            "off",
            {"off": [{"devices": "all", "mig_enabled": False, "mig_devices": {"1g.10gb": 1}}]},
            "mig_devices given for GPUs [0] with mig_enabled false",
        ),
        ("bad", {"bad": [{"devices": "some"}]}, "devices must be 'all' or a list"),
        ("empty", {"empty": []}, "must be a non-empty list"),
    ],
)
def test_bad_layouts_are_named(name: str, custom: dict[str, object], message: str) -> None:
    with pytest.raises(mig.MigLayoutError, match=None) as raised:
        mig.resolve_layout(name, custom, [0], _profiles(H100))
    assert message in str(raised.value)


def test_validation_names_the_profile_the_gpu_and_what_it_offers() -> None:
    # A100-40GB's profile asked of an H100.
    wanted = mig.resolve_layout("all-1g.5gb", {}, [0], _profiles(H100))
    wanted[0]["mig_devices"] = {"1g.5gb": 7}
    problems = mig.validate(wanted, _profiles(H100), {}, {0: "NVIDIA H100 PCIe"}, "all-1g.5gb")
    assert problems == [
        "MIG layout 'all-1g.5gb': GPU 0 (NVIDIA H100 PCIe) does not offer the profile 1g.5gb; "
        "it offers 1g.10gb (up to 7), 1g.10gb+me (up to 1), 1g.20gb (up to 4), 2g.20gb (up to 3), "
        "3g.40gb (up to 2), 4g.40gb (up to 1), 7g.80gb (up to 1)"
    ]


def test_validation_refuses_counts_that_do_not_fit() -> None:
    profiles = _profiles(H100)
    placements = mig.parse_gi_placements(read("scaleway-h100-pcie-525-lgipp.txt"))
    too_many = {0: {"mig_enabled": True, "mig_devices": {"3g.40gb": 3}}}
    assert mig.validate(too_many, profiles, placements, {0: "H100"}, "c") == [
        "MIG layout 'c': GPU 0 (H100) offers at most 2 of 3g.40gb, 3 asked"
    ]
    # Each fits alone, not together: 4g.40gb takes slices 0-3, two 3g need 0-3 and 4-7.
    together = {0: {"mig_enabled": True, "mig_devices": {"4g.40gb": 1, "3g.40gb": 2}}}
    [problem] = mig.validate(together, profiles, placements, {0: "H100"}, "c")
    assert "cannot hold 2 x 3g.40gb, 1 x 4g.40gb together" in problem
    # What the real capture shows fits: 3g.40gb at 4:4 and three 1g.10gb.
    seen = {0: {"mig_enabled": True, "mig_devices": {"3g.40gb": 1, "1g.10gb": 3}}}
    assert mig.validate(seen, profiles, placements, {0: "H100"}, "c") == []
    # Without placements the compute slices are summed: 4g + 3g + 1g = 8 > 7.
    over = {0: {"mig_enabled": True, "mig_devices": {"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 1}}}
    assert len(mig.validate(over, profiles, {}, {0: "H100"}, "c")) == 1


def _state(lgi: str, enabled: bool = True, cis: bool = True) -> dict[int, dict[str, object]]:
    instances = mig.parse_gpu_instances(read(lgi)) if lgi else []
    compute = [{"gpu": g["gpu"], "gi": g["gi"]} for g in instances] if cis else []
    gpus = [{"index": 0, "mig": {"current": enabled, "pending": enabled}}]
    return mig.current_layout(gpus, instances, compute)


def test_current_layout_from_real_lgi() -> None:
    state = _state("h100-pcie-525-lgi-3g40gb-3x1g10gb.txt")
    assert state[0]["mig_devices"] == {"1g.10gb": 3, "3g.40gb": 1}
    assert state[0]["without_ci"] == []


def test_plan_is_empty_when_the_state_matches() -> None:
    state = _state("a100-sxm4-40gb-lgi-7x1g5gb.txt")
    wanted = mig.resolve_layout("all-1g.5gb", {}, [0], _profiles(A100))
    assert mig.plan(state, wanted, _profiles(A100)) == []
    disabled = _state("", enabled=False)
    assert mig.plan(disabled, mig.resolve_layout("all-disabled", {}, [0], {}), {}) == []


def test_plan_switches_layouts_destroying_first_and_largest_created_first() -> None:
    state = _state("h100-pcie-525-lgi-3g40gb-3x1g10gb.txt")
    wanted = mig.resolve_layout("all-balanced", {}, [0], _profiles(H100))
    steps = mig.plan(state, wanted, _profiles(H100))
    assert [s["argv"] for s in steps] == [
        ["mig", "-i", "0", "-dci"],
        ["mig", "-i", "0", "-dgi"],
        ["mig", "-i", "0", "-cgi", "9,14,19,19", "-C"],
    ]


def test_plan_from_mig_off_enables_then_creates() -> None:
    state = _state("", enabled=False)
    wanted = mig.resolve_layout("all-1g.10gb", {}, [0], _profiles(H100))
    steps = mig.plan(state, wanted, _profiles(H100))
    assert [s["action"] for s in steps] == ["mig-mode-on", "create-gpu-instances"]
    assert steps[0]["argv"] == ["-i", "0", "-mig", "1"]
    assert steps[1]["argv"] == ["mig", "-i", "0", "-cgi", "19,19,19,19,19,19,19", "-C"]
    # Profiles unknown while MIG is off: the create step waits for them.
    later = mig.plan(state, {0: {"mig_enabled": True, "mig_devices": {"1g.10gb": 7}}}, {})
    assert later[1]["argv"] is None and later[1]["profiles_after_mode"] is True


def test_plan_to_disabled_destroys_then_turns_mig_off() -> None:
    state = _state("a30-24gb-lgi-4x1g6gb.txt")
    steps = mig.plan(state, mig.resolve_layout("all-disabled", {}, [0], {}), {})
    assert [s["argv"] for s in steps] == [
        ["mig", "-i", "0", "-dci"],
        ["mig", "-i", "0", "-dgi"],
        ["-i", "0", "-mig", "0"],
    ]


def test_a_gpu_instance_without_compute_instance_is_repaired() -> None:
    state = _state("a100-sxm4-40gb-lgi-2x3g20gb.txt", cis=False)
    assert state[0]["without_ci"] == [1, 2]
    wanted = {0: {"mig_enabled": True, "mig_devices": {"3g.20gb": 2}}}
    steps = mig.plan(state, wanted, _profiles(A100))
    assert steps[-1]["argv"] == ["mig", "-i", "0", "-cgi", "9,9", "-C"]


def test_describe_layout() -> None:
    text = mig.describe_layout(_state("h100-pcie-525-lgi-3g40gb-3x1g10gb.txt"))
    assert text == "GPU 0: MIG enabled, 3 x 1g.10gb, 1 x 3g.40gb\n"


def test_capture_messages_agree_with_the_parsed_tables() -> None:
    # -cgi -C printed the GI ids that -lgi then lists (scaleway H100; seansiddens A100).
    created = read("h100-pcie-525-cgi-C-3g40gb-3x1g10gb.txt")
    listed = {
        r["gi"] for r in mig.parse_gpu_instances(read("h100-pcie-525-lgi-3g40gb-3x1g10gb.txt"))
    }
    assert {int(g) for g in re.findall(r"GPU instance ID\s+(\d+) on", created)} == listed
    a100 = read("a100-sxm4-40gb-cgi-C-2x3g20gb.txt")
    assert "using profile MIG 3g.20gb (ID  9)" in a100
    assert read("h100-pcie-525-dci-dgi.txt").count("Successfully destroyed GPU instance") == len(
        listed
    )
    assert read("scaleway-h100-pcie-525-L-3g40gb-3x1g10gb.txt").count("  MIG ") == len(listed)
    assert (
        read("scaleway-h100-pcie-525-query-mig-mode-current.csv")
        .splitlines()[1]
        .endswith("Enabled")
    )
    assert read("h100-pcie-525-mig-1.txt").startswith("Enabled MIG Mode for GPU")
    assert read("h100-pcie-525-mig-0.txt").startswith("Disabled MIG Mode for GPU")


@pytest.mark.parametrize(
    "relpath",
    [
        "plugins/module_utils/mig_layout.py",
        "plugins/modules/mig_layout.py",
        "src/kubegpu/simulate/nvidia_smi_replay.py",
    ],
)
def test_what_runs_on_the_node_parses_as_python_3_8(relpath: str) -> None:
    root = Path(__file__).resolve().parents[2]
    ast.parse((root / relpath).read_text(), filename=relpath, feature_version=(3, 8))
