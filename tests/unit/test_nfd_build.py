"""tests/cluster/nfd_build.py: the NFD it builds is the release kubegpu deploys, and a cached
build is found without Go."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import artifacts
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_settings as cs

from tests.cluster import nfd_build


def test_the_module_requires_the_nfd_release_kubegpu_deploys() -> None:
    gomod = (nfd_build.MODULE_DIR / "go.mod").read_text()
    version = nfd_build.required_version(gomod, nfd_build.NFD_MODULE)
    image = next(i for i in artifacts.load()["images"] if i["name"] == "node-feature-discovery")
    assert version == image["tag"] == cs.DEFAULTS["nfd_version"]
    # The root module's go.mod replaces api/nfd by a folder its zip leaves out.
    assert nfd_build.required_version(gomod, f"{nfd_build.NFD_MODULE}/api/nfd") == version


@pytest.mark.parametrize(
    ("gomod", "found"),
    [
        ("require sigs.k8s.io/node-feature-discovery v0.19.0\n", "v0.19.0"),
        ("require (\n\tsigs.k8s.io/node-feature-discovery v0.19.0 // indirect\n)\n", "v0.19.0"),
        ("require sigs.k8s.io/node-feature-discovery/api/nfd v0.19.0\n", None),
    ],
)
def test_required_version_matches_the_whole_module_path(gomod: str, found: str | None) -> None:
    if found is None:
        with pytest.raises(
            nfd_build.BuildError, match=r"requires no sigs\.k8s\.io/node-feature-discovery$"
        ):
            nfd_build.required_version(gomod, nfd_build.NFD_MODULE)
    else:
        assert nfd_build.required_version(gomod, nfd_build.NFD_MODULE) == found


def test_a_cached_build_is_found_without_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = nfd_build.required_version(
        (nfd_build.MODULE_DIR / "go.mod").read_text(), nfd_build.NFD_MODULE
    )
    out = tmp_path / f"bin-{version}-{nfd_build.source_key()}"
    out.mkdir()
    for name in nfd_build.PROGRAMS:
        (out / name).write_bytes(b"")
    monkeypatch.setenv("PATH", str(tmp_path))  # no go
    result = nfd_build.build(tmp_path, tmp_path / "gomod")
    assert result["cached"] is True
    assert result["bin"] == {name: str(out / name) for name in ("nfd-master", "nfd-worker")}
