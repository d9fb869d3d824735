"""The vendor repository of test doubles: real .debs, a real signed index, honest labels."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kubegpu.testbed import aptrepo

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("dpkg-deb", "gpg", "gpgv")), reason="needs dpkg-deb and gpg"
)

PACKAGES = {
    "libnvidia-container1",
    "libnvidia-container-tools",
    "nvidia-container-toolkit-base",
    "nvidia-container-toolkit",
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> aptrepo.VendorRepo:
    return aptrepo.build_repo(tmp_path_factory.mktemp("vendor") / "repo")


def _stanzas(repo: aptrepo.VendorRepo) -> list[dict[str, str]]:
    result = []
    for block in (repo.flat / "Packages").read_text().strip().split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in block.splitlines():
            if line.startswith(" "):
                fields[key] += "\n" + line
            else:
                key, _, value = line.partition(": ")
                fields[key] = value
        result.append(fields)
    return result


def test_every_package_in_both_versions_says_it_is_a_test_double(
    repo: aptrepo.VendorRepo,
) -> None:
    stanzas = _stanzas(repo)
    seen = {(s["Package"], s["Version"]) for s in stanzas}
    assert seen == {(p, v) for p in PACKAGES for v in ("1.18.0-1", "1.17.8-1")}
    for stanza in stanzas:
        assert "kubegpu TEST DOUBLE" in stanza["Description"]
        deb = repo.flat / stanza["Filename"]
        assert deb.stat().st_size == int(stanza["Size"])
        info = subprocess.run(
            ["dpkg-deb", "--field", str(deb), "Package", "Version"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert info == f"Package: {stanza['Package']}\nVersion: {stanza['Version']}\n"


def test_toolkit_pins_its_base_to_the_same_version(repo: aptrepo.VendorRepo) -> None:
    for stanza in _stanzas(repo):
        if stanza["Package"] == "nvidia-container-toolkit":
            assert f"nvidia-container-toolkit-base (= {stanza['Version']})" in stanza["Depends"]


def test_inrelease_is_signed_by_the_exported_key(repo: aptrepo.VendorRepo) -> None:
    # gpgv with only the exported keyring is what apt does with signed-by.
    for signed in (["InRelease"], ["Release.gpg", "Release"]):
        proc = subprocess.run(
            ["gpgv", "--keyring", str(repo.keyring), *[str(repo.flat / s) for s in signed]],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert "THROWAWAY TEST KEY" in proc.stderr
    release = (repo.flat / "Release").read_text()
    import hashlib

    digest = hashlib.sha256((repo.flat / "Packages").read_bytes()).hexdigest()
    assert f" {digest} " in release
    assert (repo.root / aptrepo.REPO_PATH / "gpgkey.gpg").read_bytes() == repo.keyring.read_bytes()


def test_no_gpg_agent_is_left_running(repo: aptrepo.VendorRepo) -> None:
    home = str(repo.keyring.parent / "gnupg")
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            assert not ("gpg-agent" in cmdline and home in cmdline), cmdline


def _unpack(repo: aptrepo.VendorRepo, package: str, version: str, dest: Path) -> Path:
    deb = repo.flat / f"{package}_{version}_amd64.deb"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], check=True)
    return dest


@pytest.mark.parametrize("version", ["1.18.0-1", "1.17.8-1"])
def test_nvidia_ctk_double_reports_its_version(
    repo: aptrepo.VendorRepo, tmp_path: Path, version: str
) -> None:
    root = _unpack(repo, "nvidia-container-toolkit-base", version, tmp_path)
    ctk = root / "usr/bin/nvidia-ctk"
    assert os.access(ctk, os.X_OK)
    out = subprocess.run([str(ctk), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[0] == (
        f"NVIDIA Container Toolkit CLI version {version.split('-')[0]}"
    )


@pytest.mark.skipif(
    Path("/var/lib/kubegpu-simulated/root").exists(), reason="this host has a simulated GPU"
)
def test_nvidia_ctk_double_fails_like_the_real_tool_without_a_gpu(
    repo: aptrepo.VendorRepo, tmp_path: Path
) -> None:
    root = _unpack(repo, "nvidia-container-toolkit-base", "1.18.0-1", tmp_path)
    out_file = tmp_path / "nvidia.yaml"
    proc = subprocess.run(
        [str(root / "usr/bin/nvidia-ctk"), "cdi", "generate", f"--output={out_file}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert "failed to initialize NVML: ERROR_" in proc.stderr
    assert not out_file.exists()
    cli_root = _unpack(repo, "libnvidia-container-tools", "1.18.0-1", tmp_path / "cli")
    info = subprocess.run(
        [str(cli_root / "usr/bin/nvidia-container-cli"), "info"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert info.returncode == 1
    assert info.stderr.startswith("nvidia-container-cli: initialization error")
