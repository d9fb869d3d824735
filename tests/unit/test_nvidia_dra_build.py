"""tests/cluster/nvidia_dra_build.py: the go.mod of k8s.io/kubernetes that the Go module proxy
does not describe is served from a file proxy, read from the module's zip: the shared module
cache's when an earlier build left it, else one downloaded into a scratch cache that goes again."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from tests.cluster import nvidia_dra_build as dra

GOMOD_TEXT = b"module k8s.io/kubernetes\n\ngo 1.25.0\n"


def version() -> str:
    gomod = (dra.MODULE_DIR / "go.mod").read_text()
    return dra.gobuild.required_version(gomod, dra.DESCRIBED_HERE)


def write_zip(path: Path, ver: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{dra.DESCRIBED_HERE}@{ver}/go.mod", GOMOD_TEXT)
        archive.writestr(f"{dra.DESCRIBED_HERE}@{ver}/README.md", "not read\n")


def test_the_go_mod_is_served_from_the_shared_module_cache_zip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ver = version()
    gomodcache = tmp_path / "gomod"
    write_zip(gomodcache / "cache/download" / dra.DESCRIBED_HERE / "@v" / f"{ver}.zip", ver)
    monkeypatch.setenv("GOPROXY", "https://proxy.invalid")

    def no_download(cache: Path, version: str) -> bytes:
        raise AssertionError("downloaded although the shared module cache holds the zip")

    monkeypatch.setattr(dra, "fetched_gomod", no_download)
    cache = tmp_path / "cache"
    answer = dra.file_proxy(cache, gomodcache, (dra.MODULE_DIR / "go.mod").read_text())

    assert answer == f"file://{cache / 'proxy'},https://proxy.invalid"
    served = cache / "proxy" / dra.DESCRIBED_HERE / "@v"
    assert (served / f"{ver}.mod").read_bytes() == GOMOD_TEXT
    assert json.loads((served / f"{ver}.info").read_text()) == {"Version": ver}


def test_without_the_zip_it_is_downloaded_into_a_scratch_cache_removed_afterwards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ver = version()
    cache = tmp_path / "cache"
    calls: list[tuple[list[str], dict[str, str]]] = []

    def fake_run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
        assert env is not None
        calls.append((list(argv[1:]), env))
        if argv[1:3] == ["mod", "download"]:
            # What the go command answers from the scratch file proxy's placeholders.
            placeholders = cache / "fetch/proxy" / dra.DESCRIBED_HERE / "@v"
            assert (placeholders / f"{ver}.mod").read_text() == "module k8s.io/kubernetes\n"
            scratch = Path(env["GOMODCACHE"])
            write_zip(scratch / "cache/download" / dra.DESCRIBED_HERE / "@v" / f"{ver}.zip", ver)
        return ""

    monkeypatch.setattr(dra.gobuild, "run", fake_run)
    monkeypatch.setattr(dra.gobuild, "go_tool", lambda purpose="": "/usr/bin/go")
    monkeypatch.setenv("GOPROXY", "https://proxy.invalid")
    dra.file_proxy(cache, tmp_path / "empty-gomod", (dra.MODULE_DIR / "go.mod").read_text())

    served = cache / "proxy" / dra.DESCRIBED_HERE / "@v" / f"{ver}.mod"
    assert served.read_bytes() == GOMOD_TEXT
    assert [argv for argv, _ in calls] == [
        ["mod", "download", f"{dra.DESCRIBED_HERE}@{ver}"],
        ["clean", "-modcache"],
    ]
    env = calls[0][1]
    assert env["GOMODCACHE"] == str(cache / "fetch/mod")
    assert env["GOPROXY"] == f"file://{cache / 'fetch/proxy'},https://proxy.invalid"
    assert env["GOSUMDB"] == "off"
    assert not (cache / "fetch").exists()


def test_a_failed_download_leaves_no_scratch_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"

    def failing_run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
        if argv[1:3] == ["mod", "download"]:
            (cache / "fetch/mod/cache").mkdir(parents=True)
            raise dra.BuildError("go mod download in fetch failed (1):\n403 Forbidden")
        return ""

    monkeypatch.setattr(dra.gobuild, "run", failing_run)
    monkeypatch.setattr(dra.gobuild, "go_tool", lambda purpose="": "/usr/bin/go")
    monkeypatch.setenv("GOPROXY", "https://proxy.invalid")
    with pytest.raises(dra.BuildError, match="403 Forbidden"):
        dra.fetched_gomod(cache, version())
    assert not (cache / "fetch").exists()
