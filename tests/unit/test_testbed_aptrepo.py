"""The testbed's vendor repository: real .debs, a real signed index, honest labels.

NVIDIA's Go programs are built from NVIDIA's module (toolkit_build.py, cached; the first run
builds them, about a minute); nvidia-container-cli stays a test double.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kubegpu.testbed import aptrepo

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("dpkg-deb", "gpg", "gpgv", "go", "gcc")),
    reason="needs dpkg-deb, gpg, and Go with gcc (NVIDIA's programs are built with cgo)",
)

DOUBLES = {"libnvidia-container1", "libnvidia-container-tools"}
BUILT = {"nvidia-container-toolkit-base", "nvidia-container-toolkit"}
PACKAGES = DOUBLES | BUILT
VERSIONS = ("1.20.2-1", "1.17.8-1")


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


def test_every_package_in_both_versions_says_what_it_is(repo: aptrepo.VendorRepo) -> None:
    stanzas = _stanzas(repo)
    seen = {(s["Package"], s["Version"]) for s in stanzas}
    assert seen == {(p, v) for p in PACKAGES for v in VERSIONS}
    assert aptrepo.VERSIONS == VERSIONS
    for stanza in stanzas:
        if stanza["Package"] in DOUBLES:
            assert "kubegpu TEST DOUBLE" in stanza["Description"]
        else:
            upstream = stanza["Version"].split("-")[0]
            assert "TEST DOUBLE" not in stanza["Description"]
            assert "built by the kubegpu testbed from NVIDIA's Go module" in stanza["Description"]
            assert (
                f"github.com/NVIDIA/nvidia-container-toolkit@v{upstream}" in stanza["Description"]
            )
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


def _files(repo: aptrepo.VendorRepo, package: str, version: str) -> set[str]:
    deb = repo.flat / f"{package}_{version}_amd64.deb"
    listing = subprocess.run(
        ["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True
    ).stdout
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(listing)) as tar:
        return {m.name.removeprefix("./") for m in tar.getmembers() if m.isfile()}


def test_the_programs_are_split_as_nvidias_packaging_says(repo: aptrepo.VendorRepo) -> None:
    """1.20.2's base has the CLI, the runtime, the CDI hook and NVIDIA's CDI refresh units;
    1.17.8 has no refresh units; the toolkit package has the OCI hook."""
    units = {
        "lib/systemd/system/nvidia-cdi-refresh.service",
        "lib/systemd/system/nvidia-cdi-refresh.path",
        "lib/systemd/system/nvidia-cdi-refresh.service.d/10-container-engines.conf",
        "lib/udev/rules.d/99-nvidia-cdi-refresh.rules",
        "etc/nvidia-container-toolkit/nvidia-cdi-refresh.env",
    }
    programs = {"usr/bin/nvidia-ctk", "usr/bin/nvidia-container-runtime", "usr/bin/nvidia-cdi-hook"}
    base = "nvidia-container-toolkit-base"
    assert _files(repo, base, "1.20.2-1") == programs | units | {
        f"usr/share/doc/{base}/{aptrepo.BUILT_MARKER}"
    }
    assert _files(repo, base, "1.17.8-1") == programs | {
        f"usr/share/doc/{base}/{aptrepo.BUILT_MARKER}"
    }
    for version in VERSIONS:
        assert _files(repo, "nvidia-container-toolkit", version) == {
            "usr/bin/nvidia-container-runtime-hook",
            f"usr/share/doc/nvidia-container-toolkit/{aptrepo.BUILT_MARKER}",
        }
    conffiles = subprocess.run(
        ["dpkg-deb", "--info", str(repo.flat / f"{base}_1.20.2-1_amd64.deb"), "conffiles"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert conffiles == "/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env\n"


@pytest.mark.parametrize("version", VERSIONS)
def test_nvidias_programs_report_their_release(
    repo: aptrepo.VendorRepo, tmp_path: Path, version: str
) -> None:
    root = _unpack(repo, "nvidia-container-toolkit-base", version, tmp_path)
    hook = _unpack(repo, "nvidia-container-toolkit", version, tmp_path / "hook")
    upstream = version.split("-")[0]
    for program, first_line in (
        (root / "usr/bin/nvidia-ctk", f"NVIDIA Container Toolkit CLI version {upstream}"),
        (root / "usr/bin/nvidia-cdi-hook", f"NVIDIA CDI Hook version {upstream}"),
        (
            hook / "usr/bin/nvidia-container-runtime-hook",
            f"NVIDIA Container Runtime Hook version {upstream}",
        ),
    ):
        assert os.access(program, os.X_OK)
        out = subprocess.run([str(program), "--version"], capture_output=True, text=True)
        assert out.stdout.splitlines()[0] == first_line, (program, out.stdout, out.stderr)


@pytest.mark.skipif(
    any(
        Path(p).exists() for p in ("/dev/nvidiactl", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
    ),
    reason="this host has an NVIDIA driver",
)
def test_nvidia_ctk_fails_without_a_gpu_and_the_cli_double_too(
    repo: aptrepo.VendorRepo, tmp_path: Path
) -> None:
    root = _unpack(repo, "nvidia-container-toolkit-base", VERSIONS[0], tmp_path)
    out_file = tmp_path / "nvidia.yaml"
    proc = subprocess.run(
        [str(root / "usr/bin/nvidia-ctk"), "cdi", "generate", f"--output={out_file}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert "failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND" in proc.stderr
    assert not out_file.exists()
    cli_root = _unpack(repo, "libnvidia-container-tools", VERSIONS[0], tmp_path / "cli")
    info = subprocess.run(
        [str(cli_root / "usr/bin/nvidia-container-cli"), "info"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert info.returncode == 1
    assert info.stderr.startswith("nvidia-container-cli: initialization error")


def test_a_missing_go_is_said_plainly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kubegpu.testbed import toolkit_build

    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(toolkit_build.ToolkitBuildError, match="no `go` on PATH"):
        toolkit_build.build("1.20.2", cache=tmp_path / "cache", gomodcache=tmp_path / "mod")
