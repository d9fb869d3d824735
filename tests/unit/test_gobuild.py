"""kubegpu.testbed.gobuild, the cached Go build every kubegpu build goes through: keys, the warm
check, the two keys kept, failures. `go` is a stand-in script on PATH that writes the programs it
is asked for (the real builds are run by tests/cluster/build.py and its kin)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kubegpu.testbed import gobuild
from tests.cluster import build as cluster

# Writes one file per package into the -o folder, named as go names a package's program, and
# records its argv and environment; exits 1 with a message when FAKE_GO_FAIL is set.
FAKE_GO = """#!/bin/sh
if [ -n "$FAKE_GO_FAIL" ]; then echo "cannot find module providing package x" >&2; exit 1; fi
echo "$@ CGO_ENABLED=$CGO_ENABLED GOFLAGS=$GOFLAGS GOCACHE=$GOCACHE" >> "$FAKE_GO_LOG"
out=
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out=$2; shift 2 ;;
    build|-trimpath) shift ;;
    -ldflags) shift 2 ;;
    *) mkdir -p "$out" && : > "$out/$(basename "$1")"; shift ;;
  esac
done
"""


@pytest.fixture
def fake_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "go").write_text(FAKE_GO)
    (tools / "go").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GO_LOG", str(tmp_path / "go.log"))
    monkeypatch.delenv("FAKE_GO_FAIL", raising=False)
    return tmp_path / "go.log"


def build(cache: Path, key: str, logged: list[str]) -> bool:
    def make(partial: Path) -> None:
        env = gobuild.go_env(cache, cache / "mod", cgo=False)
        gobuild.go_build(cache, env, "-s -w", f"{partial}/", ["example.org/m/cmd/a", "./cmd/b"])

    return gobuild.build_once(cache / f"bin-{key}", ["a", "b"], make, "bin-*", logged.append)


def keys(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if p.name.startswith("bin-"))


def test_a_build_is_kept_under_its_key_and_found_again_without_go(
    tmp_path: Path, fake_go: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache, logged = tmp_path / "cache", []
    assert build(cache, "k1", logged) is False
    assert sorted(p.name for p in (cache / "bin-k1").iterdir()) == ["a", "b"]
    assert logged[-1].startswith("built in ") and logged[-1].endswith(f": {cache / 'bin-k1'}")
    argv = fake_go.read_text().split()
    assert argv[:4] == ["build", "-trimpath", "-ldflags", "-s"]
    assert "CGO_ENABLED=0" in argv and f"GOCACHE={cache / 'gocache'}" in argv
    assert "GOFLAGS=-mod=readonly" in argv
    assert not list(cache.glob(".partial-*"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no go, no nice
    assert build(cache, "k1", logged) is True


def test_the_two_most_recently_built_or_used_keys_are_kept(tmp_path: Path, fake_go: Path) -> None:
    cache, logged = tmp_path / "cache", []
    build(cache, "k1", logged)
    build(cache, "k2", logged)
    assert keys(cache) == ["bin-k1", "bin-k2"]
    os.utime(cache / "bin-k1", (1000, 1000))
    os.utime(cache / "bin-k2", (2000, 2000))
    # A checkout with k1's inputs finds its binaries, which makes k1 the one used last ...
    assert build(cache, "k1", logged) is True
    # ... so a third key's build removes k2, and another kind of folder is left alone.
    (cache / "dra-test-driver-k0").mkdir()
    assert build(cache, "k3", logged) is False
    assert keys(cache) == ["bin-k1", "bin-k3"]
    assert (cache / "dra-test-driver-k0").is_dir()


@pytest.mark.parametrize(("keep", "left"), [(2, ["bin-c", "bin-d"]), (1, ["bin-d"])])
def test_prune_keeps_the_newest_folders_of_the_pattern(
    tmp_path: Path, keep: int, left: list[str]
) -> None:
    for mtime, name in enumerate(["bin-b", "bin-a", "bin-c", "bin-d", ".partial-bin-e", "lib-f"]):
        (tmp_path / name).mkdir()
        os.utime(tmp_path / name, (1000 + mtime, 1000 + mtime))
    (tmp_path / "bin-file").write_text("not a build")
    removed = gobuild.prune(tmp_path, "bin-*", keep)
    assert sorted(p.name for p in removed) == sorted({"bin-a", "bin-b", "bin-c"} - set(left))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [*left, ".partial-bin-e", "lib-f", "bin-file"]
    )


def test_a_failed_build_leaves_no_partial_folder_and_keeps_the_old_keys(
    tmp_path: Path, fake_go: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache, logged = tmp_path / "cache", []
    build(cache, "k1", logged)
    build(cache, "k2", logged)
    monkeypatch.setenv("FAKE_GO_FAIL", "1")
    with pytest.raises(gobuild.GoBuildError, match=r"(?s)go build in .* failed \(1\):\n.*cannot"):
        build(cache, "k3", logged)
    assert keys(cache) == ["bin-k1", "bin-k2"]
    assert not list(cache.glob(".partial-*"))


def test_a_build_that_writes_too_little_fails(tmp_path: Path) -> None:
    with pytest.raises(gobuild.GoBuildError, match=r"the build wrote no b in .*\.partial-bin-k1"):
        gobuild.build_once(
            tmp_path / "bin-k1", ["a", "b"], lambda p: (p / "a").write_text(""), "bin-*", print
        )
    assert list(tmp_path.iterdir()) == [tmp_path / ".lock"]


def test_no_go_on_path_says_what_is_needed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(gobuild.GoBuildError, match=r"^no `go` on PATH: NFD needs the Go toolc"):
        gobuild.go_tool("NFD")


def test_the_key_hashes_contents_and_names_relative_to_the_root(tmp_path: Path) -> None:
    for checkout in ("a", "b"):
        (tmp_path / checkout / "src").mkdir(parents=True)
        (tmp_path / checkout / "src" / "go.mod").write_text("module m\n")
        (tmp_path / checkout / "build.py").write_text("# build\n")

    def key(checkout: str, *extra: str) -> str:
        root = tmp_path / checkout
        return gobuild.cache_key(root, [root / "src", root / "build.py"], *extra)

    assert key("a") == key("b")  # two work trees with the same inputs share the binaries
    assert len(key("a")) == 16
    assert key("a", "v1.2.3") != key("a")
    (tmp_path / "b" / "src" / "go.sum").write_text("")
    assert key("a") != key("b")
    (tmp_path / "b" / "src" / "go.sum").unlink()
    (tmp_path / "b" / "src" / "go.mod").write_text("module m // changed\n")
    assert key("a") != key("b")


def test_required_version_names_the_go_mod_that_lacks_the_module() -> None:
    gomod = "require (\n\tk8s.io/kubernetes v1.37.2 // indirect\n)\n"
    assert gobuild.required_version(gomod, "k8s.io/kubernetes") == "v1.37.2"
    with pytest.raises(gobuild.GoBuildError, match=r"^src/go.mod requires no k8s.io/kubernetes/s"):
        gobuild.required_version(gomod, "k8s.io/kubernetes/staging", "src/go.mod")


def test_the_cluster_build_script_finds_its_cached_binaries_without_the_venv(
    tmp_path: Path,
) -> None:
    """`python3 tests/cluster/build.py` with no site packages (-S: no kubegpu, no venv) loads the
    helper module alone and answers from the cache."""
    kubernetes = cluster.module_version((cluster.SRC / "go.mod").read_text(), "k8s.io/kubernetes")
    out = tmp_path / f"bin-{kubernetes}-{cluster.source_key()}"
    names = list(cluster.PROGRAMS)
    out.mkdir()
    for name in names:
        (out / name).write_text("")
    kubelets = tmp_path / f"kubelets-{cluster.source_key()}"
    kubelets.mkdir()
    older = cluster.older_kubelets()
    for name in older:
        (kubelets / name).write_text("")
    proc = subprocess.run(
        [sys.executable, "-S", str(cluster.HERE / "build.py")],
        env={"PATH": str(tmp_path), "KUBEGPU_CLUSTER_CACHE": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"{name}: {out / name}" for name in names]
    with_kubelets = subprocess.run(
        [sys.executable, "-S", str(cluster.HERE / "build.py"), "--kubelets"],
        env={"PATH": str(tmp_path), "KUBEGPU_CLUSTER_CACHE": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert with_kubelets.returncode == 0, with_kubelets.stderr
    minor = ".".join(kubernetes[1:].split(".")[:2])
    assert with_kubelets.stdout.splitlines() == [
        *(f"{name}: {out / name}" for name in names),
        *(f"kubelet {name[8:]}: {kubelets / name}" for name in older),
        f"kubelet {minor}: {out / 'kubelet'}",
    ]
