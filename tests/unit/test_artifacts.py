"""The artifact manifest: its shape, the defaults and rendered objects that must agree with it,
references read whole, the registry's token flow, and `kubegpu artifacts list` on the sample.

The mirror checks against a real registry and apt repository are in
tests/integration/test_artifacts_mirror.py.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import urllib.error
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.kubegpu.gpu.plugins.module_utils import artifacts

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = artifacts.load()
DIGEST = "sha256:" + "a" * 64


def role_defaults() -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for path in sorted((ROOT / "roles").glob("*/defaults/main.yml")):
        merged.update(yaml.safe_load(path.read_text()) or {})
    return merged


def images_in(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [
            i
            for k, v in value.items()
            for i in ([v] if k == "image" and isinstance(v, str) else images_in(v))
        ]
    if isinstance(value, list):
        return [i for v in value for i in images_in(v)]
    return []


def test_every_image_is_pinned_with_its_source_and_switches() -> None:
    defaults = role_defaults()
    names = [image["name"] for image in MANIFEST["images"]]
    assert len(names) == len(set(names))
    for image in MANIFEST["images"]:
        assert image["digest"] is None or artifacts._DIGEST.fullmatch(image["digest"]), image
        assert image["tag"] and image["source"].strip() and image["used_by"]
        assert set(image["platforms"]) <= {"linux/amd64", "linux/arm64"} and image["platforms"]
        switches = [w.partition("=")[0] for w in image["when"]]
        for variable in [*image["settings"].values(), *switches]:
            assert variable in defaults, f"{image['name']}: {variable} is no role default"
    # Pulled by digest by default, but for the images whose digest no source records.
    assert [i["name"] for i in MANIFEST["images"] if not i["digest"]] == [
        "node-feature-discovery",
        "tensorflow",
    ]


def test_the_defaults_take_their_pins_from_the_manifest() -> None:
    """Role defaults, argument specs and the settings modules' DEFAULTS agree with it."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts/sync-artifact-pins"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, "run scripts/sync-artifact-pins:\n" + run.stdout + run.stderr
    defaults = role_defaults()
    for variable, value in artifacts.pinned_defaults(MANIFEST).items():
        assert defaults[variable] == value, variable


def test_every_image_a_rendered_object_uses_is_in_the_manifest_by_digest() -> None:
    """The goldens of the default settings (rendered by test_manifest_golden) and the committed
    examples pull only manifest images, each by the manifest's digest."""
    pinned = {
        artifacts.parse_reference(artifacts.manifest_reference(i)) for i in MANIFEST["images"]
    }
    files = [
        *(ROOT / "tests/unit/golden").glob("*/*.yaml"),
        *(ROOT / "examples/workloads").glob("*.yaml"),
    ]
    seen = set()
    for path in files:
        if "air-gapped" in path.name:
            continue  # rendered for a mirror: its own registry and digests
        for document in yaml.safe_load_all(path.read_text()):
            for ref in images_in(document):
                parsed = artifacts.parse_reference(ref)
                assert parsed in pinned, f"{path.relative_to(ROOT)}: {ref} is not a manifest pin"
                seen.add(parsed)
    assert {r[:3] for r in seen if not r[3]} <= {
        (i["registry"], i["path"], i["tag"]) for i in MANIFEST["images"] if not i["digest"]
    }
    assert len(seen) >= 3


@pytest.mark.parametrize(
    ("ref", "parsed"),
    [
        (
            "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
            ("nvcr.io", "nvidia/k8s-device-plugin", "v0.20.0", ""),
        ),
        (f"pytorch/pytorch:2.7.1@{DIGEST}", ("docker.io", "pytorch/pytorch", "2.7.1", DIGEST)),
        ("busybox:1", ("docker.io", "library/busybox", "1", "")),
        (
            f"127.0.0.1:5000/mirror/nvidia/x@{DIGEST}",
            ("127.0.0.1:5000", "mirror/nvidia/x", "", DIGEST),
        ),
        ("localhost/x:1", ("localhost", "x", "1", "")),
    ],
)
def test_references_are_read_whole(ref: str, parsed: tuple[str, str, str, str]) -> None:
    assert artifacts.parse_reference(ref) == parsed


@pytest.mark.parametrize(
    "ref",
    [
        "nvcr.io/nvidia/x",  # no tag, no digest
        "nvcr.io/nvidia/x:v1\n",
        "nvcr.io/nvidia/x:v1 ",
        "nvcr.io/nvidia/x:v1;rm",
        "NVIDIA/x:v1",
        f"nvcr.io/nvidia/x@{DIGEST[:-1]}",
        "nvcr.io/nvidia/x:v1\x00",
        "nvcr.io/nvidia/\uff58:v1",  # a look-alike of x
        "https://nvcr.io/nvidia/x:v1",
        "",
    ],
)
def test_bad_references_are_refused(ref: str) -> None:
    with pytest.raises(artifacts.ArtifactError, match="is not an image reference"):
        artifacts.parse_reference(ref)


class _Answer(io.BytesIO):
    def __init__(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
        super().__init__(body)
        self.status, self.headers = status, headers


def test_the_registry_token_flow_a_stand_in_registry_replays() -> None:
    """A STAND-IN registry (the distribution API's answers as nvcr.io gives them: 401 with a
    Bearer challenge, a token, then the manifest); the real registry is in the integration
    tests, which need no token."""
    asked: list[tuple[str, str, str | None]] = []

    def opener(request: Any, timeout: float) -> _Answer:
        asked.append((request.get_method(), request.full_url, request.get_header("Authorization")))
        if request.full_url.startswith("https://auth.test/token"):
            return _Answer(200, {}, json.dumps({"token": "T"}).encode())
        if request.get_header("Authorization") != "Bearer T":
            raise urllib.error.HTTPError(
                request.full_url,
                401,
                "Unauthorized",
                {
                    "WWW-Authenticate": 'Bearer realm="https://auth.test/token",service="reg.test",'
                    'scope="repository:nvidia/x:pull"'
                },  # type: ignore[arg-type]
                None,
            )
        return _Answer(200, {"Docker-Content-Digest": DIGEST})

    image = {"registry": "reg.test", "path": "nvidia/x", "tag": "v1", "digest": DIGEST}
    assert artifacts.registry_has(opener, image) is None
    assert asked == [
        ("HEAD", f"https://reg.test/v2/nvidia/x/manifests/{DIGEST}", None),
        (
            "GET",
            "https://auth.test/token?service=reg.test&scope=repository%3Anvidia%2Fx%3Apull",
            None,
        ),
        ("HEAD", f"https://reg.test/v2/nvidia/x/manifests/{DIGEST}", "Bearer T"),
    ]


def kubegpu(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubegpu", *args], capture_output=True, text=True, timeout=120
    )


def test_list_prints_what_the_sample_inventory_pulls() -> None:
    run = kubegpu("artifacts", "list", "-i", str(ROOT / "inventories/sample"), "--only", "images")
    assert run.returncode == 0, run.stderr
    # Every image the role defaults switch on (DRA's driver only with gpu_cluster_allocation dra).
    defaults = role_defaults()
    assert [artifacts.parse_reference(line) for line in run.stdout.splitlines()] == [
        artifacts.parse_reference(artifacts.manifest_reference(i))
        for i in MANIFEST["images"]
        if not i["when"] or any(artifacts._switched_on(defaults, w) for w in i["when"])
    ]
    data = json.loads(
        kubegpu("artifacts", "list", "-i", str(ROOT / "inventories/sample"), "--json").stdout
    )
    toolkit = [p["name"] for p in data["packages"] if p["group"] == "nvidia-container-toolkit"]
    assert toolkit == MANIFEST["packages"][0]["names"]
    driver = {p["name"] for p in data["packages"] if p["group"] == "nvidia-driver"}
    # Debian's own driver packages, both kernel module flavours (the node picks one).
    assert {"nvidia-driver", "nvidia-open-kernel-dkms", "nvidia-kernel-dkms", "libcuda1"} <= driver
    assert data["architectures"] == ["amd64"]


def test_list_leaves_out_what_the_inventory_switches_off(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n        g1: {}\n"
    )
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text(
        "gpu_cluster_dcgm_exporter_enabled: false\nnvidia_driver_source: cuda_repo\n"
        "nvidia_driver_kernel_module_type: open\n"
    )
    data = json.loads(kubegpu("artifacts", "list", "-i", str(tmp_path), "--json").stdout)
    assert "dcgm-exporter" not in [i["name"] for i in data["images"]]
    driver = [p["name"] for p in data["packages"] if p["group"] == "nvidia-driver"]
    assert driver == ["nvidia-open", "nvidia-driver-pinning-580"]


def test_bad_architectures_are_refused_naming_the_variable(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n        g1: {}\n"
    )
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("kubegpu_architectures: [x86_64]\n")
    run = kubegpu("artifacts", "list", "-i", str(tmp_path))
    assert run.returncode == 4
    assert "kubegpu_architectures" in run.stderr and "amd64, arm64" in run.stderr
