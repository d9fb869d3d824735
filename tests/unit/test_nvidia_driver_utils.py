"""module_utils/nvidia_driver.py: branches, versions, GPU generations, CUDA compatibility.

Device ids and package versions come from real captures (src/kubegpu/captures) and from real
package indexes where noted; the roles' copies of the same rules (vars/main.yml) are checked
against the Python ones at the end.
"""

from __future__ import annotations

import csv
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from ansible_collections.kubegpu.gpu.plugins.module_utils import nvidia_driver as nd

ROLES = Path(__file__).resolve().parents[2] / "roles"
SRC = Path(__file__).resolve().parents[2] / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))


# --- branches and versions ---------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [("535", 535), ("580", 580), (595, 595)])
def test_parse_branch_accepts_three_digit_branches(value: str, expected: int) -> None:
    assert nd.parse_branch(value) == expected


@pytest.mark.parametrize(
    ("value", "wrong"),
    [
        ("58", "three digits"),
        ("r580", "three digits"),
        ("580.65", "three digits"),
        ("", "three digits"),
        (None, "three digits"),
        ("418", "older than 450"),
        # The whole string: the value goes into package names and a modprobe file.
        (" 595 ", "three digits"),
        ("580\n", "three digits"),
    ],
)
def test_parse_branch_names_the_variable_and_the_rule(value: object, wrong: str) -> None:
    with pytest.raises(nd.DriverInputError) as err:
        nd.parse_branch(value)
    assert "nvidia_driver_branch" in str(err.value)
    assert wrong in str(err.value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("535.309.01", (535, 309, 1)), ("580.65.06", (580, 65, 6)), ("570.26", (570, 26))],
)
def test_parse_driver_version(value: str, expected: tuple[int, ...]) -> None:
    assert nd.parse_driver_version(value) == expected


@pytest.mark.parametrize("value", ["latest", "580", "580.x", "58.65.06", "580.65.06.1", ""])
def test_parse_driver_version_rejects_what_is_not_a_version(value: str) -> None:
    with pytest.raises(nd.DriverInputError, match="nvidia_driver_version"):
        nd.parse_driver_version(value)


def test_version_matches_branch() -> None:
    assert nd.version_matches_branch("580.95.05", "580")
    assert not nd.version_matches_branch("550.54.14", "580")
    assert nd.version_branch("535.309.01") == "535"


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [("535.54.03", "535.309.01", -1), ("570.26", "570.26.0", 0), ("580.65.06", "575.51.03", 1)],
)
def test_compare_versions_is_numeric(left: str, right: str, expected: int) -> None:
    assert nd.compare_versions(left, right) == expected


# Package versions as the package managers print them. Debian: `apt-cache policy nvidia-driver`
# on bookworm with non-free (security and main); Ubuntu: packages.ubuntu.com pages of
# nvidia-dkms-580 and nvidia-fabricmanager-590; RHEL/Fedora: NVIDIA's driver installation
# guide, "Version locking" (dnf4 versionlock output).
@pytest.mark.parametrize(
    ("package_version", "upstream"),
    [
        ("535.309.01-0+deb12u1", "535.309.01"),
        ("535.261.03-1", "535.261.03"),
        ("580.173.02-0ubuntu0.26.04.1", "580.173.02"),
        ("590.48.01-0ubuntu0.25.10.2", "590.48.01"),
        ("3:575.51-1.fc41", "575.51"),
        ("11.8.89~11.8.0-5~deb12u1", None),
        ("", None),
    ],
)
def test_upstream_version_strips_epoch_and_revision(package_version: str, upstream: str) -> None:
    assert nd.upstream_version(package_version) == upstream


# --- GPU generations from PCI device ids -------------------------------------------------------


def _xml_device_ids(fixtures: Path) -> dict[str, str]:
    found = {}
    for path in sorted((fixtures / "nvidia-smi-xml").glob("*.xml")):
        root = ET.parse(path).getroot()
        gpu = root.find("gpu")
        assert gpu is not None
        found[gpu.findtext("product_name", "")] = gpu.findtext("pci/pci_device_id", "")
    return found


def test_generation_of_the_gpus_in_real_nvidia_smi_xml(fixtures_real: Path) -> None:
    ids = _xml_device_ids(fixtures_real)
    # The XML gives device and vendor as one hexadecimal word, DDDDVVVV (vendor 10DE).
    assert ids == {"NVIDIA A100-SXM4-40GB": "20B010DE", "Tesla T4": "1EB810DE"}
    assert nd.generation_for_device_id(ids["Tesla T4"]) == "turing"
    assert nd.generation_for_device_id(ids["NVIDIA A100-SXM4-40GB"]) == "ampere"
    assert all(nd.device_supports_open(device) for device in ids.values())


def test_generation_of_the_h100_in_the_real_query_gpu_capture(fixtures_real: Path) -> None:
    path = fixtures_real / "nvidia-smi-csv" / "utkuozdemir-h100-80gb-hbm3-590-query-gpu.csv"
    with path.open(newline="") as handle:
        header, row = list(csv.reader(handle))[:2]
    values = {h.strip(): v.strip() for h, v in zip(header, row, strict=False)}
    assert values["name"] == "NVIDIA H100 80GB HBM3"
    gpu = nd.describe_gpu(values["pci.device_id"])
    assert gpu == {
        "device_id": "0x2330",
        "generation": "hopper",
        "open_supported": True,
        "requires_open": False,
    }


def test_the_rtx_5090_of_the_real_no_devices_capture_needs_open_modules(
    fixtures_real: Path,
) -> None:
    sources = (fixtures_real / "SOURCES.md").read_text()
    row = next(line for line in sources.splitlines() if "no-devices-rtx5090" in line)
    device = re.search(r"10de:([0-9a-f]{4})", row)
    assert device is not None
    assert nd.describe_gpu(device.group(1)) == {
        "device_id": "0x2b85",
        "generation": "blackwell",
        "open_supported": True,
        "requires_open": True,
    }


@pytest.mark.parametrize(
    ("device_id", "generation"),
    [
        ("0x1DB1", "volta"),  # V100-SXM2: the last pre-Turing data center GPU
        ("0x1DFF", "volta"),
        ("0x1E00", "turing"),  # the open-module boundary
        ("0x1E02", "turing"),  # TITAN RTX, lowest id of open-gpu-kernel-modules' table
        ("0x1F82", "turing"),  # TU117
        ("0x2182", "turing"),  # TU116 sits inside Ampere's neighbourhood
        ("0x15F8", "pascal"),  # Tesla P100
        ("0x1B80", "pascal"),
        ("0x17FD", "maxwell"),  # Tesla M40
        ("0x1194", "kepler"),
        ("0x2236", "ampere"),  # A10
        ("0x2335", "hopper"),  # H200
        ("0x26B9", "ada"),  # L40S
        ("0x2901", "blackwell"),  # B200
    ],
)
def test_generation_boundaries(device_id: str, generation: str) -> None:
    assert nd.generation_for_device_id(device_id) == generation
    assert nd.device_supports_open(device_id) == (int(device_id, 16) >= nd.FIRST_OPEN_DEVICE_ID)


def test_grace_hopper_requires_open_but_other_hopper_does_not() -> None:
    assert nd.device_requires_open("0x2342")
    assert not nd.device_requires_open("0x2330")


def test_device_id_ranges_cover_the_pci_space_without_gaps() -> None:
    expected_next = 0
    for first, last, generation in nd.DEVICE_ID_RANGES:
        assert first == expected_next, (hex(first), generation)
        assert generation in nd.GENERATION_FACTS
        expected_next = last + 1
    assert expected_next == 0x10000


@pytest.mark.parametrize("bad", ["nvidia", "0xZZ", "-1", ""])
def test_parse_hex_id_rejects_garbage(bad: str) -> None:
    with pytest.raises(nd.DriverInputError):
        nd.parse_hex_id(bad)


@pytest.mark.parametrize(
    ("vendor", "pci_class", "kind"),
    [
        ("0x10de", "0x030200", "gpu"),  # 3D controller (data center GPUs)
        ("0x10de", "0x030000", "gpu"),  # VGA controller
        ("0x10de", "0x068000", "nvswitch"),
        ("0x10de", "0x040300", "audio"),
        ("0x10de", "0x0c0330", "usb"),
        ("0x10de", "0x0c8000", "usb"),
        ("0x10de", "0x0b4000", "other"),
        ("0x8086", "0x030000", None),
        ("0x1af4", "0xffff00", None),
    ],
)
def test_classify_pci_function(vendor: str, pci_class: str, kind: str | None) -> None:
    assert nd.classify_pci_function(vendor, pci_class) == kind


# --- kernel module flavour ---------------------------------------------------------------------

T4 = nd.describe_gpu("0x1EB8")
V100 = nd.describe_gpu("0x1DB1")
B200 = nd.describe_gpu("0x2901")


@pytest.mark.parametrize(
    ("requested", "gpus", "branch", "effective"),
    [
        ("auto", [T4], "535", "open"),
        ("auto", [T4, T4], "580", "open"),
        ("auto", [V100], "580", "proprietary"),
        ("auto", [V100, T4], "570", "proprietary"),
        ("auto", [], "580", "open"),
        ("auto", [], "550", "proprietary"),
        ("auto", [B200], "580", "open"),
        ("open", [T4], "535", "open"),
        ("proprietary", [T4], "580", "proprietary"),
    ],
)
def test_choose_module_type(
    requested: str, gpus: list[dict[str, object]], branch: str, effective: str
) -> None:
    chosen, reason = nd.choose_module_type(requested, gpus, branch)
    assert chosen == effective
    assert reason


@pytest.mark.parametrize(
    ("requested", "gpus", "message"),
    [
        ("open", [V100], "older than Turing"),
        ("proprietary", [B200], "supported only by the open kernel modules"),
        ("auto", [V100, B200], "no single driver flavour"),
        ("closed", [T4], "allowed are auto, open, proprietary"),
    ],
)
def test_choose_module_type_refuses_what_cannot_work(
    requested: str, gpus: list[dict[str, object]], message: str
) -> None:
    with pytest.raises(nd.DriverInputError, match=message):
        nd.choose_module_type(requested, gpus, "580")


@pytest.mark.parametrize(
    ("gpus", "branch", "problem"),
    [
        ([B200], "550", "too old for Blackwell"),
        ([V100], "590", "no longer supports Volta"),
        ([nd.describe_gpu("0x1194")], "535", "no longer supports Kepler"),
    ],
)
def test_generation_problems(gpus: list[dict[str, object]], branch: str, problem: str) -> None:
    problems = nd.generation_problems(gpus, branch)
    assert len(problems) == 1
    assert problem in problems[0]
    assert "nvidia_driver_branch" in problems[0]


def test_generation_problems_none_for_supported_pairs() -> None:
    assert nd.generation_problems([T4, nd.describe_gpu("0x2330")], "535") == []
    assert nd.generation_problems([V100], "580") == []
    assert nd.generation_problems([B200], "570") == []


@pytest.mark.parametrize(
    ("count", "product", "needed"),
    [
        (6, "", True),
        (0, "NVIDIA DGX H100", True),
        (0, "DGXH100", False),
        (0, "HGX H200 8-GPU", True),
        (0, "ProLiant DL380 Gen10", False),
        (0, "", False),
    ],
)
def test_needs_fabricmanager(count: int, product: str, needed: bool) -> None:
    assert nd.needs_fabricmanager(count, product) is needed


# --- CUDA --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cuda", "driver", "ok", "warns"),
    [
        ("13.0", "580", True, False),
        ("13.0", "580.65.06", True, False),
        ("13.0", "575.51.03", False, False),
        ("12.8", "570.26", True, False),
        ("12.4", "535.309.01", True, True),
        ("12.2", "535.54.03", True, False),
        ("12.0", "525.60.13", True, False),
        ("12.0", "520.61.05", False, False),
        ("11.8", "450", True, True),
        ("11.8", "535", True, False),
    ],
)
def test_cuda_driver_check(cuda: str, driver: str, ok: bool, warns: bool) -> None:
    result, message = nd.cuda_driver_check(cuda, driver)
    assert result is ok
    if not ok:
        assert "needs an NVIDIA driver of branch" in message
    else:
        assert bool(message) is warns


@pytest.mark.parametrize("value", ["12", "12.x", "10.2", "v12.4", "12.4.1"])
def test_parse_cuda_version_rejects(value: str) -> None:
    with pytest.raises(nd.DriverInputError, match="cuda_toolkit_version"):
        nd.parse_cuda_version(value)


def test_the_cuda_table_matches_nvidias_major_ranges() -> None:
    # "CUDA 13.x >= 580, CUDA 12.x >= 525, CUDA 11.x >= 450" (CUDA Compatibility guide).
    assert nd.CUDA_MIN_BRANCH == {11: 450, 12: 525, 13: 580}
    for release, driver in nd.CUDA_TOOLKIT_DRIVER.items():
        major = int(release.split(".")[0])
        assert nd.parse_driver_version(driver)[0] >= nd.CUDA_MIN_BRANCH[major], release


# --- host state --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("SecureBoot enabled\n", "enabled"),
        ("SecureBoot disabled\n", "disabled"),
        ("This system doesn't support Secure Boot\n", "unsupported"),
        ("EFI variables are not supported on this system\n", "unsupported"),
        ("", "unknown"),
    ],
)
def test_parse_mokutil_sb_state(text: str, state: str) -> None:
    assert nd.parse_mokutil_sb_state(text) == state


@pytest.mark.parametrize(
    ("data", "enabled"),
    [(b"\x06\x00\x00\x00\x01", True), (b"\x06\x00\x00\x00\x00", False), (b"\x06\x00", None)],
)
def test_parse_efivar_secureboot(data: bytes, enabled: bool | None) -> None:
    assert nd.parse_efivar_secureboot(data) is enabled


def test_loaded_modules_of_a_simulated_host(tmp_path: Path) -> None:
    from kubegpu.simulate import build_simulated_host_root

    build_simulated_host_root(tmp_path, "telegraf-tesla-t4-515")
    names = nd.loaded_modules((tmp_path / "proc" / "modules").read_text())
    assert {"nvidia", "nvidia_uvm", "nvidia_drm", "nvidia_modeset"} <= names
    assert "nouveau" not in names


# --- the roles carry the same rules as data ----------------------------------------------------


def _role_vars(role: str) -> dict[str, object]:
    data = yaml.safe_load((ROLES / role / "vars" / "main.yml").read_text())
    assert isinstance(data, dict)
    return data


def test_cuda_toolkit_role_tables_match_module_utils() -> None:
    data = _role_vars("cuda_toolkit")
    assert {int(k): v for k, v in data["__cuda_toolkit_min_driver_branch"].items()} == (
        nd.CUDA_MIN_BRANCH
    )
    assert data["__cuda_toolkit_shipped_driver"] == nd.CUDA_TOOLKIT_DRIVER


@pytest.mark.parametrize(
    "value", ["535", "580", "58", "r580", "5800", "450", "099", "580\n", " 580", "580 "]
)
def test_driver_role_branch_regex_matches_module_utils(value: str) -> None:
    data = _role_vars("nvidia_driver")
    assert data["__nvidia_driver_min_branch"] == nd.MIN_BRANCH
    role_ok = bool(re.match(str(data["__nvidia_driver_branch_regex"]), value)) and int(
        value if value.isdigit() else 0
    ) >= int(str(data["__nvidia_driver_min_branch"]))
    try:
        nd.parse_branch(value)
        python_ok = True
    except nd.DriverInputError:
        python_ok = False
    assert role_ok == python_ok


@pytest.mark.parametrize(
    "value",
    [
        "535.309.01",
        "570.26",
        "580.65.06",
        "580",
        "latest",
        "580.65.06.1",
        "5800.1.1",
        "580.65.06\n",
    ],
)
def test_driver_role_version_regex_matches_module_utils(value: str) -> None:
    data = _role_vars("nvidia_driver")
    role_ok = bool(re.match(str(data["__nvidia_driver_version_regex"]), value))
    try:
        nd.parse_driver_version(value)
        python_ok = True
    except nd.DriverInputError:
        python_ok = False
    assert role_ok == python_ok


@pytest.mark.parametrize(
    ("package_version", "upstream"),
    [("535.309.01-0+deb12u1", "535.309.01"), ("3:575.51-1.fc41", "575.51")],
)
def test_driver_role_upstream_regex_matches_module_utils(
    package_version: str, upstream: str
) -> None:
    data = _role_vars("nvidia_driver")
    pattern = str(data["__nvidia_driver_upstream_regex"])
    assert re.sub(pattern, str(data["__nvidia_driver_first_group"]), package_version) == upstream
    assert nd.upstream_version(package_version) == upstream
