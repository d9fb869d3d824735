"""nvidia_smi parsers against every real capture in src/kubegpu/captures.

Each table below names every file of its fixture folder, and a test checks that the tables and
the folders list the same files: a new capture fails here until its values are written down.
Layouts that no capture holds yet (later drivers renamed elements) are made from a real capture
by the rename that driver made; each such edit says what it stands for.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import nvidia_smi as smi

SRC = Path(__file__).resolve().parents[2] / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from kubegpu.simulate import build_simulated_host_root  # noqa: E402

A100 = "netdata-a100-sxm4-40gb-mig-510.xml"
T4 = "telegraf-tesla-t4-515.xml"

# Values read from the files themselves.
XML_EXPECTED = {
    A100: {
        "driver_version": "510.47.03",
        "cuda_version": "11.6",
        "attached_gpus": 1,
        "gpu": {
            "index": 0,
            "name": "NVIDIA A100-SXM4-40GB",
            "uuid": "GPU-27b94a00-ed54-5c24-b1fd-1054085de32a",
            "pci_bus_id": "00000000:00:04.0",
            "serial": "1324321002473",
            "minor_number": 0,
            "memory_total_mib": 40960,
            "persistence_mode": False,
            "temperature_c": 36,
            "power_draw_w": 66.92,
            "compute_mode": "Default",
            "retired_pages_pending": None,
            "retired_pages_count": None,
            "remapped_rows": {
                "pending": None,
                "failure": None,
                "correctable": None,
                "uncorrectable": None,
            },
            "clock_reasons_active": [],
        },
        "mig": {"current": True, "pending": True},
        # (index, gpu_instance_id, compute_instance_id, SMs, MiB total, MiB used)
        "mig_devices": [(0, 1, 0, 42, 19968, 19), (1, 2, 0, 42, 19968, 19)],
        # Volatile counters are N/A under MIG; the aggregate ones are 0.
        "ecc": {
            "current": True,
            "pending": True,
            "volatile_uncorrected": None,
            "aggregate_uncorrected": 0,
            "volatile_corrected": None,
            "aggregate_corrected": 0,
        },
    },
    T4: {
        "driver_version": "515.105.01",
        "cuda_version": "11.7",
        "attached_gpus": 1,
        "gpu": {
            "index": 0,
            "name": "Tesla T4",
            "uuid": "GPU-d37e67a5-91dd-3774-a5cb-99096249601a",
            "pci_bus_id": "00000000:00:1E.0",
            "serial": "0000000000000",
            "minor_number": 0,
            "memory_total_mib": 15360,
            "persistence_mode": False,
            "temperature_c": 40,
            "power_draw_w": 26.78,
            "compute_mode": "Default",
            "retired_pages_pending": False,
            "retired_pages_count": 0,
            "remapped_rows": {
                "pending": None,
                "failure": None,
                "correctable": None,
                "uncorrectable": None,
            },
            "clock_reasons_active": [],
        },
        "mig": {"current": None, "pending": None},
        "mig_devices": [],
        "ecc": {
            "current": True,
            "pending": True,
            "volatile_uncorrected": 0,
            "aggregate_uncorrected": 0,
            "volatile_corrected": 0,
            "aggregate_corrected": 0,
        },
    },
}

QUADRO = "akash-provider-configs-12-2x-quadro-rtx4000-535-L.txt"
LEGACY = "nvidia-docs-a100-sxm4-40gb-450-mig-mixed-legacy-uuid-L.txt"
H100 = "utkuozdemir-8xh100-mig-1g10gb-L.txt"
LIST_EXPECTED = {
    QUADRO: {
        "gpus": [
            (0, "Quadro RTX 4000", "GPU-c7b57be0-94ff-d352-a59b-d0ee00aeed43"),
            (1, "Quadro RTX 4000", "GPU-d6de6afc-bdfe-75c4-5273-0544439153fc"),
        ],
        "mig": {},
    },
    LEGACY: {
        "gpus": [(0, "A100-SXM4-40GB", "GPU-4200ccc0-2667-d4cb-9137-f932c716232a")],
        # GPU index -> [(profile, device index, gpu instance, compute instance)]
        "mig": {0: [("3g.20gb", 0, 2, 0), ("2g.10gb", 1, 3, 0), ("1g.5gb", 2, 9, 0)]},
    },
    H100: {
        "gpus": [
            (0, "NVIDIA H100 80GB HBM3", "GPU-63d1e50a-b952-d15c-0740-12bc14859142"),
            (1, "NVIDIA H100 80GB HBM3", "GPU-7e7d2a20-56b8-3220-e75c-1f3185864bda"),
            (2, "NVIDIA H100 80GB HBM3", "GPU-20e54ffb-782f-47b6-2d6f-2641b20a4ec1"),
            (3, "NVIDIA H100 80GB HBM3", "GPU-8e70d727-bd2d-0723-0bf5-015d93cb90e6"),
            (4, "NVIDIA H100 80GB HBM3", "GPU-3d761336-f338-7808-b8d6-dc4c2d11537f"),
            (5, "NVIDIA H100 80GB HBM3", "GPU-7d6267d7-7109-1970-9adf-852cdf00b314"),
            (6, "NVIDIA H100 80GB HBM3", "GPU-f10582d0-a657-b746-3bed-366c6a014f07"),
            (7, "NVIDIA H100 80GB HBM3", "GPU-882ebfab-da98-c41e-357c-47272c0d560d"),
        ],
        "mig": dict((i, [("1g.10gb", d, None, None) for d in range(7)]) for i in range(8)),
    },
}
# Default-table captures in the same folder: not -L output, so no GPU may be read from them.
TABLES = ["utkuozdemir-h100-80gb-hbm3-590-idle.txt", "utkuozdemir-h200-mig-580-idle.txt"]

ERRORS_EXPECTED = {
    "couldnt-communicate.txt": ("driver_not_loaded", 9, None, []),
    "device-handle-unknown-error-nvidia-docker-1553.txt": (
        "gpu_error",
        None,
        None,
        ["0000:09:00.0"],
    ),
    "no-devices-rtx5090-rebar-disabled-ogkm-862.txt": ("no_devices", 6, None, []),
    "nvml-mismatch-550.144-intel-llvm-17614.txt": ("driver_library_mismatch", 18, "550.144", []),
}


def read(fixtures: Path, rel: str) -> str:
    return (fixtures / rel).read_text(encoding="utf-8")


def replace_once(text: str, old: str, new: str) -> str:
    """Edit a real capture in one place, failing loudly when the place is not there."""
    assert text.count(old) >= 1, f"{old!r} is not in the capture"
    return text.replace(old, new)


# --- every file is covered -------------------------------------------------------------------


def test_tables_cover_every_capture(fixtures_real: Path) -> None:
    assert sorted(p.name for p in (fixtures_real / "nvidia-smi-xml").iterdir()) == sorted(
        XML_EXPECTED
    )
    assert sorted(p.name for p in (fixtures_real / "nvidia-smi-table").iterdir()) == sorted(
        list(LIST_EXPECTED) + TABLES
    )
    assert sorted(p.name for p in (fixtures_real / "nvidia-smi-errors").iterdir()) == sorted(
        ERRORS_EXPECTED
    )


# --- nvidia-smi -q -x --------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(XML_EXPECTED))
def test_parse_query_xml_real(fixtures_real: Path, name: str) -> None:
    want = XML_EXPECTED[name]
    facts = smi.parse_query_xml(read(fixtures_real, "nvidia-smi-xml/" + name))
    assert facts["driver_version"] == want["driver_version"]
    assert facts["cuda_version"] == want["cuda_version"]
    assert facts["attached_gpus"] == want["attached_gpus"] == len(facts["gpus"])
    assert facts["warnings"] == []
    gpu = facts["gpus"][0]
    for key, value in want["gpu"].items():
        assert gpu[key] == value, key
    assert gpu["mig"]["current"] == want["mig"]["current"]
    assert gpu["mig"]["pending"] == want["mig"]["pending"]
    got = [
        (
            d["index"],
            d["gpu_instance_id"],
            d["compute_instance_id"],
            d["multiprocessor_count"],
            d["memory_total_mib"],
            d["memory_used_mib"],
        )
        for d in gpu["mig"]["devices"]
    ]
    assert got == want["mig_devices"]
    assert all(d["uuid"] is None and d["profile"] is None for d in gpu["mig"]["devices"])
    assert gpu["ecc"] == want["ecc"]


def test_value_split_across_lines_is_read(fixtures_real: Path) -> None:
    # In the A100 capture <clocks_throttle_reason_applications_clocks_setting> holds
    # "Not Active" followed by a line break and indentation.
    text = read(fixtures_real, "nvidia-smi-xml/" + A100)
    assert "<clocks_throttle_reason_applications_clocks_setting>Not Active\n" in text
    assert smi.parse_query_xml(text)["gpus"][0]["clock_reasons_active"] == []
    active = replace_once(
        text,
        "<clocks_throttle_reason_applications_clocks_setting>Not Active\n",
        "<clocks_throttle_reason_applications_clocks_setting>Active\n",
    )
    assert smi.parse_query_xml(active)["gpus"][0]["clock_reasons_active"] == [
        "applications_clocks_setting"
    ]


def test_later_driver_layout_renames(fixtures_real: Path) -> None:
    """R530+ moved power to <gpu_power_readings>; R535+ renamed throttle reasons to clock event
    reasons; later drivers report power_draw as N/A beside instant_power_draw."""
    text = read(fixtures_real, "nvidia-smi-xml/" + T4)
    renamed = text.replace("power_readings>", "gpu_power_readings>").replace(
        "clocks_throttle_reason", "clocks_event_reason"
    )
    renamed = replace_once(
        renamed,
        "<clocks_event_reason_sw_power_cap>Not Active",
        "<clocks_event_reason_sw_power_cap>Active",
    )
    gpu = smi.parse_query_xml(renamed)["gpus"][0]
    assert gpu["power_draw_w"] == 26.78
    assert gpu["clock_reasons_active"] == ["sw_power_cap"]
    instant = replace_once(
        renamed,
        "<power_draw>26.78 W</power_draw>",
        "<power_draw> N/A </power_draw><instant_power_draw> 66.84 W </instant_power_draw>",
    )
    assert smi.parse_query_xml(instant)["gpus"][0]["power_draw_w"] == 66.84


def test_ecc_layouts_of_450_and_550(fixtures_real: Path) -> None:
    text = read(fixtures_real, "nvidia-smi-xml/" + T4)
    block = text[text.index("<volatile>") : text.index("</volatile>") + len("</volatile>")]
    # R450-R470: counters nested under single_bit/double_bit with a total.
    old = (
        "<volatile><single_bit><device_memory>3</device_memory><total>3</total></single_bit>"
        "<double_bit><device_memory>1</device_memory><register_file>N/A</register_file>"
        "<total>1</total></double_bit></volatile>"
    )
    gpu = smi.parse_query_xml(text.replace(block, old))["gpus"][0]
    assert gpu["ecc"]["volatile_uncorrected"] == 1
    assert gpu["ecc"]["volatile_corrected"] == 3
    # R550+: sram_uncorrectable split into _parity and _secded.
    new = (
        "<volatile><sram_correctable>0</sram_correctable>"
        "<sram_uncorrectable_parity>2</sram_uncorrectable_parity>"
        "<sram_uncorrectable_secded>1</sram_uncorrectable_secded>"
        "<dram_correctable>0</dram_correctable><dram_uncorrectable>4</dram_uncorrectable>"
        "</volatile>"
    )
    gpu = smi.parse_query_xml(text.replace(block, new))["gpus"][0]
    assert gpu["ecc"]["volatile_uncorrected"] == 7
    assert gpu["ecc"]["aggregate_uncorrected"] == 0


def test_remapped_rows_with_children(fixtures_real: Path) -> None:
    """Ampere and later drivers give <remapped_rows> children instead of N/A."""
    text = read(fixtures_real, "nvidia-smi-xml/" + A100)
    rows = (
        "<remapped_rows><remapped_row_corr>0</remapped_row_corr><remapped_row_unc>1"
        "</remapped_row_unc><remapped_row_pending>Yes</remapped_row_pending>"
        "<remapped_row_failure>No</remapped_row_failure></remapped_rows>"
    )
    gpu = smi.parse_query_xml(replace_once(text, "<remapped_rows>N/A</remapped_rows>", rows))
    assert gpu["gpus"][0]["remapped_rows"] == {
        "pending": True,
        "failure": False,
        "correctable": 0,
        "uncorrectable": 1,
    }


def test_unavailable_values_become_none() -> None:
    for value in (
        "N/A",
        "[N/A]",
        "Not Supported",
        "[Not Supported]",
        "Requested functionality has been deprecated",
        "[Requested functionality has been deprecated]",
        "",
        "  \n  ",
    ):
        assert smi.clean(value) is None, value
    assert smi.to_bool("Enabled") is True and smi.to_bool("No") is False
    assert smi.to_bool("[N/A]") is None
    assert smi.to_mib("80 GiB") == 81920 and smi.to_mib("N/A") is None
    assert smi.to_number(" 37 C ") == 37


def test_warning_lines_before_the_xml_are_kept(fixtures_real: Path) -> None:
    text = read(fixtures_real, "nvidia-smi-xml/" + T4)
    facts = smi.parse_query_xml("WARNING: infoROM is corrupted at gpu 0000:00:1E.0\n" + text)
    assert facts["warnings"] == ["WARNING: infoROM is corrupted at gpu 0000:00:1E.0"]
    assert facts["gpus"][0]["uuid"] == "GPU-d37e67a5-91dd-3774-a5cb-99096249601a"


@pytest.mark.parametrize(
    "bad, message",
    [
        ("", "printed nothing"),
        ("nvidia-smi-errors/couldnt-communicate.txt", "no <nvidia_smi_log>"),
        ("truncated", "not well-formed"),
    ],
)
def test_parse_query_xml_rejects(fixtures_real: Path, bad: str, message: str) -> None:
    if bad == "truncated":
        full = read(fixtures_real, "nvidia-smi-xml/" + T4)
        bad_text = full[: len(full) // 2]
    elif bad:
        bad_text = read(fixtures_real, bad)
    else:
        bad_text = ""
    with pytest.raises(smi.NvidiaParseError, match=message):
        smi.parse_query_xml(bad_text)


# --- nvidia-smi -L -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(LIST_EXPECTED))
def test_parse_gpu_list_real(fixtures_real: Path, name: str) -> None:
    want = LIST_EXPECTED[name]
    gpus = smi.parse_gpu_list(read(fixtures_real, "nvidia-smi-table/" + name))
    assert [(g["index"], g["name"], g["uuid"]) for g in gpus] == want["gpus"]
    for gpu in gpus:
        got = [
            (d["profile"], d["device_index"], d["gpu_instance_id"], d["compute_instance_id"])
            for d in gpu["mig_devices"]
        ]
        assert got == want["mig"].get(gpu["index"], [])
        for device in gpu["mig_devices"]:
            if device["uuid_format"] == "legacy":
                assert device["parent_uuid"] == gpu["uuid"]
                assert device["uuid"].startswith("MIG-" + gpu["uuid"] + "/")
            else:
                assert device["parent_uuid"] is None


def test_h100_mig_uuids(fixtures_real: Path) -> None:
    gpus = smi.parse_gpu_list(read(fixtures_real, "nvidia-smi-table/" + H100))
    uuids = [d["uuid"] for g in gpus for d in g["mig_devices"]]
    assert len(uuids) == len(set(uuids)) == 56
    assert gpus[0]["mig_devices"][0]["uuid"] == "MIG-4d0efb7d-0970-51d9-b761-0686be6b8af3"
    assert gpus[7]["mig_devices"][6]["uuid"] == "MIG-bc03b921-4d24-573e-9d4b-1cdc47b1f4b4"
    assert all(d["uuid_format"] == "modern" for g in gpus for d in g["mig_devices"])


@pytest.mark.parametrize("name", TABLES)
def test_default_table_is_not_a_gpu_list(fixtures_real: Path, name: str) -> None:
    assert smi.parse_gpu_list(read(fixtures_real, "nvidia-smi-table/" + name)) == []


def test_gpu_list_spacing_and_errors(fixtures_real: Path) -> None:
    text = read(fixtures_real, "nvidia-smi-table/" + LEGACY)
    squeezed = text.replace("  MIG 3g.20gb Device 0:", "\tMIG   3g.20gb\tDevice   0 :")
    assert smi.parse_gpu_list(squeezed.replace("\n", "\r\n")) == smi.parse_gpu_list(text)
    with pytest.raises(smi.NvidiaParseError, match="before any GPU"):
        smi.parse_gpu_list(text.split("\n", 1)[1])


def test_merge_gpu_list_adds_uuid_and_profile(fixtures_real: Path) -> None:
    facts = smi.parse_query_xml(read(fixtures_real, "nvidia-smi-xml/" + A100))
    # The legacy -L capture is of another A100 (another UUID): nothing may be matched.
    other = smi.parse_gpu_list(read(fixtures_real, "nvidia-smi-table/" + LEGACY))
    assert smi.merge_gpu_list(facts, other) == 0
    # A listing of this GPU, as nvidia-smi -L prints it for two MIG devices (UUIDs invented
    # for the test: no -L capture of this machine exists).
    listing = smi.parse_gpu_list(
        "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-27b94a00-ed54-5c24-b1fd-1054085de32a)\n"
        "  MIG 3g.20gb     Device  0: (UUID: MIG-00000000-0000-0000-0000-000000000000)\n"
        "  MIG 3g.20gb     Device  1: (UUID: MIG-00000000-0000-0000-0000-000000000001)\n"
    )
    assert smi.merge_gpu_list(facts, listing) == 2
    devices = facts["gpus"][0]["mig"]["devices"]
    assert [(d["profile"], d["uuid"][-1], d["gpu_instance_id"]) for d in devices] == [
        ("3g.20gb", "0", 1),
        ("3g.20gb", "1", 2),
    ]


# --- failures ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(ERRORS_EXPECTED))
def test_classify_real_errors(fixtures_real: Path, name: str) -> None:
    klass, rc, nvml, bus_ids = ERRORS_EXPECTED[name]
    text = read(fixtures_real, "nvidia-smi-errors/" + name)
    assert smi.classify_failure(text, rc) == klass
    assert smi.classify_failure(text, None) == klass  # the text alone decides
    described = smi.describe_failure(text, rc)
    assert described["class"] == klass
    assert described["remedy"] == smi.REMEDIES[klass]
    assert described["nvml_library_version"] == nvml
    assert described["bus_ids"] == bus_ids
    assert described["message"] == " ".join(text.split())
    # The rc alone, when the text is lost, still points the same way where nvidia-smi has a
    # documented code for it.
    if rc is not None:
        assert smi.classify_failure("", rc) == klass


def test_wrapped_and_curly_quote_forms(fixtures_real: Path) -> None:
    text = read(fixtures_real, "nvidia-smi-errors/couldnt-communicate.txt")
    # Some pastes wrap the message and use a curly apostrophe (qixuema/envs#4).
    wrapped = text.replace("couldn't", "couldn\u2018t").replace(
        " communicate with", "\ncommunicate with"
    )
    assert "\n" in wrapped.strip()
    assert smi.classify_failure(wrapped, 9) == "driver_not_loaded"
    # GPU lost, as printed in JosephKJ/OWOD#81 and wrapped in AlexeyAB/darknet#86.
    lost = (
        "Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost. Reboot the "
        "system to recover this GPU"
    )
    assert smi.classify_failure(lost, 15) == "gpu_lost"
    assert smi.classify_failure(lost.replace("Reboot the ", "Reboot\n "), None) == "gpu_lost"
    assert smi.failed_bus_ids(lost) == ["0000:02:00.0"]
    # No space before the bus id (pdbear/syno_nvidia_gpu_driver#22).
    nospace = "Unable to determine the device handle for GPU0000:07:00.0: Unknown Error"
    assert smi.classify_failure(nospace, None) == "gpu_error"
    assert smi.failed_bus_ids(nospace) == ["0000:07:00.0"]


@pytest.mark.parametrize(
    "output, rc, klass",
    [
        ("bash: nvidia-smi: command not found", 127, "not_installed"),
        (
            "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that "
            "the NVIDIA Display Driver is properly installed and present in your system.",
            12,
            "not_installed",
        ),
        (
            "Failed to initialize NVML: Driver/Library version mismatch",
            None,
            "driver_library_mismatch",
        ),
        ("", 255, "unknown"),
        ("Failed to initialize NVML: Insufficient Permissions", 4, "unknown"),
    ],
)
def test_classify_other_forms(output: str, rc: int | None, klass: str) -> None:
    assert smi.classify_failure(output, rc) == klass


def test_every_class_has_a_remedy() -> None:
    assert set(smi.REMEDIES) == set(smi.FAILURE_CLASSES)
    assert all(len(text) > 40 for text in smi.REMEDIES.values())


# --- /proc/driver/nvidia/version -------------------------------------------------------------

PROC_VERSIONS = [
    # (source, text, version, flavor, arch, gcc)
    (
        "fixture open 565 (nixGL#186)",
        None,
        "565.57.01",
        "open",
        "x86_64",
        "gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)",
    ),
    (
        "proprietary x86_64, zzzhouuu/truenas-nvidia-drivers#19",
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.173.02  Tue Jun 23 08:38:17 UTC 2026\n"
        "GCC version:  gcc version 14.2.0 (Ubuntu 14.2.0-4ubuntu2~24.04.1)\n",
        "580.173.02",
        "proprietary",
        "x86_64",
        "gcc version 14.2.0 (Ubuntu 14.2.0-4ubuntu2~24.04.1)",
    ),
    (
        "proprietary x86_64 535, build date left out",
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03\n",
        "535.129.03",
        "proprietary",
        "x86_64",
        None,
    ),
    (
        "proprietary aarch64",
        "NVRM version: NVIDIA UNIX aarch64 Kernel Module  550.120  Fri Sep 13 11:01:10 UTC 2024",
        "550.120",
        "proprietary",
        "aarch64",
        None,
    ),
    (
        "open aarch64",
        "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  550.144.03  Release Build  "
        "(dvs-builder@U16-I2-C01-12-4)  Mon Dec 30 17:33:24 UTC 2024\n"
        "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)",
        "550.144.03",
        "open",
        "aarch64",
        "gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)",
    ),
]


@pytest.mark.parametrize(
    "source, text, version, flavor, arch, gcc", PROC_VERSIONS, ids=[p[0] for p in PROC_VERSIONS]
)
def test_parse_proc_version(
    fixtures_real: Path,
    source: str,
    text: str | None,
    version: str,
    flavor: str,
    arch: str,
    gcc: str | None,
) -> None:
    if text is None:
        text = read(
            fixtures_real,
            "container-cli-and-proc/proc-driver-nvidia-version-open-565-ubuntu2404-nixgl-186.txt",
        )
        # A "Module ([0-9.]+)" regex fails on this layout (SOURCES.md).
        assert "Module for x86_64  565.57.01" in text
    parsed = smi.parse_proc_version(text)
    assert (parsed["version"], parsed["flavor"], parsed["arch"], parsed["gcc_version"]) == (
        version,
        flavor,
        arch,
        gcc,
    )


def test_container_cli_info_names_the_version_without_flavor(fixtures_real: Path) -> None:
    text = read(
        fixtures_real,
        "container-cli-and-proc/nvidia-container-cli-info-rtx2080ti-418-nvidia-docker-1121.txt",
    )
    parsed = smi.parse_proc_version(text)
    assert parsed["version"] == "418.56"
    assert parsed["flavor"] is None  # a bare version does not say open or proprietary


@pytest.mark.parametrize("flavor", ["proprietary", "open"])
def test_simulated_proc_version_parses(tmp_path: Path, flavor: str) -> None:
    info = build_simulated_host_root(tmp_path, T4[:-4], flavor=flavor)
    parsed = smi.parse_proc_version((tmp_path / "proc/driver/nvidia/version").read_text())
    assert (parsed["version"], parsed["flavor"]) == (info["driver_version"], flavor)
    assert parsed["version"] == "515.105.01"


def test_parse_proc_version_rejects_other_text(fixtures_real: Path) -> None:
    with pytest.raises(smi.NvidiaParseError, match="NVRM version"):
        smi.parse_proc_version(read(fixtures_real, "nvidia-smi-errors/couldnt-communicate.txt"))
    with pytest.raises(smi.NvidiaParseError, match="no driver version"):
        smi.parse_proc_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  (none)")


def test_versions_agree() -> None:
    assert smi.versions_agree("550.144", "550.144.03")
    assert not smi.versions_agree("550.144", "550.120")
    assert not smi.versions_agree("515.105.01", "")
    assert smi.version_tuple("580.95.05") == (580, 95, 5)
    assert smi.version_tuple("abc") is None


# --- running nvidia-smi ------------------------------------------------------------------------


class FakeRun:
    """Answers like nvidia-smi would, from real captures; records every argv."""

    def __init__(self, answers: dict[str, tuple[int, str, str]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> tuple[int, str, str]:
        self.calls.append(argv)
        return self.answers[" ".join(argv[1:])]


def test_query_runs_list_only_for_mig(fixtures_real: Path) -> None:
    t4 = FakeRun({"-q -x": (0, read(fixtures_real, "nvidia-smi-xml/" + T4), "")})
    result = smi.query(t4, "/usr/bin/nvidia-smi")
    assert result["ok"] and t4.calls == [["/usr/bin/nvidia-smi", "-q", "-x"]]
    assert result["facts"]["gpus"][0]["name"] == "Tesla T4"
    a100 = FakeRun(
        {
            "-q -x": (0, read(fixtures_real, "nvidia-smi-xml/" + A100), ""),
            "-L": (9, read(fixtures_real, "nvidia-smi-errors/couldnt-communicate.txt"), ""),
        }
    )
    result = smi.query(a100, "/usr/bin/nvidia-smi")
    assert [c[1:] for c in a100.calls] == [["-q", "-x"], ["-L"]]
    assert result["ok"] and "failed (rc 9)" in result["notes"][0]


def test_query_failures(fixtures_real: Path) -> None:
    text = read(fixtures_real, "nvidia-smi-errors/nvml-mismatch-550.144-intel-llvm-17614.txt")
    result = smi.query(FakeRun({"-q -x": (18, text, "")}), "/usr/bin/nvidia-smi")
    assert not result["ok"] and result["failure"]["class"] == "driver_library_mismatch"
    assert result["failure"]["nvml_library_version"] == "550.144"
    garbled = smi.query(FakeRun({"-q -x": (0, "<nvidia_smi_log><gpu>", "")}), "/x/nvidia-smi")
    assert garbled["failure"]["class"] == "unknown"
    assert "not well-formed" in garbled["failure"]["message"]
    simulated = smi.query(FakeRun({"-q -x": (9, text, smi.SIMULATION_MARKER + ": replay")}), "/x")
    assert simulated["simulated"] is True
    assert smi.SIMULATION_MARKER not in simulated["failure"]["message"]


def test_resolve_nvidia_smi(tmp_path: Path) -> None:
    binary = tmp_path / "bin" / "nvidia-smi"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    assert smi.find_nvidia_smi(str(tmp_path / "none") + ":" + str(binary.parent), ()) == str(binary)
    assert smi.find_nvidia_smi("", ()) is None
    path, failure, error = smi.resolve_nvidia_smi("relative/nvidia-smi", "")
    assert path is None and failure is None and "absolute path" in error
    path, failure, error = smi.resolve_nvidia_smi(str(tmp_path / "missing"), "")
    assert failure["class"] == "not_installed" and error is None
    assert smi.resolve_nvidia_smi(str(binary), "") == (str(binary), None, None)
