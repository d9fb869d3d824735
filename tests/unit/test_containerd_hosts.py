"""Unit tests for plugins/module_utils/containerd_hosts.py (registry mirrors as hosts.toml) and
the drop-in's registry config_path; what containerd does with them runs in
tests/integration/test_container_runtime_suites.py (a pull through a mirror on the bridge)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import containerd as c
from ansible_collections.kubegpu.gpu.plugins.module_utils import containerd_hosts as h
from ansible_collections.kubegpu.gpu.plugins.module_utils import containerd_validate as cv

DATA = Path(__file__).parent / "data" / "containerd"
NVCT = "/usr/bin/nvidia-container-runtime"
MIRROR = {"endpoints": ["http://10.213.5.1:5000"]}


@pytest.mark.parametrize(
    ("mirrors", "message"),
    [
        ([], "container_runtime_registry_mirrors must be a mapping"),
        ({"registry k8s": MIRROR}, "['registry k8s']: the key must be a registry host"),
        ({"docker.io": ["http://m:5000"]}, "['docker.io'] must be a mapping with endpoints"),
        ({"docker.io": {"endpoints": []}}, "['docker.io'].endpoints must be a non-empty list"),
        ({"docker.io": {"endpoints": ["m:5000"]}}, "'m:5000' is not a mirror URL"),
        ({"docker.io": {"endpoints": ["ftp://m"]}}, "'ftp://m' is not a mirror URL"),
        ({"docker.io": dict(MIRROR, plain_http=True)}, "unknown setting plain_http; allowed:"),
        ({"docker.io": dict(MIRROR, skip_verify="yes")}, ".skip_verify must be true or false"),
        ({"docker.io": dict(MIRROR, ca="ca.pem")}, ".ca must be the absolute path"),
    ],
)
def test_bad_mirror_settings_name_the_variable(mirrors, message: str) -> None:
    problem = h.mirror_problem(mirrors)
    assert problem is not None and message in problem
    assert problem.startswith("container_runtime_registry_mirrors")


@pytest.mark.parametrize(
    "mirrors",
    [
        {},
        {"registry.k8s.io": MIRROR},
        {"10.0.0.1:5000": {"endpoints": ["https://m.example/v2-prefix"], "ca": "/etc/ca.pem"}},
        {"_default": dict(MIRROR, fallback=False, skip_verify=True)},
    ],
)
def test_good_mirror_settings(mirrors) -> None:
    assert h.mirror_problem(mirrors) is None


def test_hosts_toml_is_what_containerd_reads() -> None:
    text = h.render_hosts(
        "docker.io",
        {"endpoints": ["http://10.213.5.1:5000", "https://m.example"], "skip_verify": True},
    )
    assert text.startswith("# " + h.HOSTS_MARK)
    assert tomllib.loads(text) == {
        "server": "https://registry-1.docker.io",
        "host": {
            "http://10.213.5.1:5000": {"capabilities": ["pull", "resolve"], "skip_verify": True},
            "https://m.example": {"capabilities": ["pull", "resolve"], "skip_verify": True},
        },
    }
    no_fallback = tomllib.loads(h.render_hosts("_default", MIRROR))
    assert "server" not in no_fallback
    assert "server" not in tomllib.loads(h.render_hosts("r.example", dict(MIRROR, fallback=False)))


def test_plan_hosts_writes_changes_and_removes_only_kubegpus_files() -> None:
    ours = h.render_hosts("registry.k8s.io", MIRROR)
    existing = {
        "registry.k8s.io": ours,
        "old.example": h.render_hosts("old.example", MIRROR),
        "operator.example": 'server = "https://operator.example"\n',
    }
    mirrors = {"registry.k8s.io": MIRROR, "docker.io": MIRROR}
    planned = h.plan_hosts("/etc/containerd/certs.d", mirrors, existing)
    assert list(planned["write"]) == ["/etc/containerd/certs.d/docker.io/hosts.toml"]
    assert planned["remove"] == ["/etc/containerd/certs.d/old.example/hosts.toml"]
    # Nothing to do the second time.
    existing = {"registry.k8s.io": ours, "docker.io": h.render_hosts("docker.io", MIRROR)}
    assert h.plan_hosts("/x", mirrors, existing) == {"write": {}, "remove": []}
    # The operator's own hosts.toml for a host kubegpu is asked to mirror: refused.
    with pytest.raises(h.ContainerdHostsError, match="is not kubegpu's; nothing was changed"):
        h.plan_hosts("/x", {"operator.example": MIRROR}, {"operator.example": "server = 'x'\n"})


def test_read_existing(tmp_path: Path) -> None:
    assert h.read_existing(str(tmp_path / "absent")) == {}
    (tmp_path / "a.example").mkdir()
    (tmp_path / "a.example" / "hosts.toml").write_text("x\n")
    (tmp_path / "no-hosts-file").mkdir()
    assert h.read_existing(str(tmp_path)) == {"a.example": "x\n"}


@pytest.mark.parametrize(
    ("path", "version", "config_version", "plugin", "effective"),
    [
        (
            "config-default-containerd-1.7.24-debian13.toml",
            (1, 7, 24),
            2,
            "io.containerd.grpc.v1.cri",
            "io.containerd.grpc.v1.cri",
        ),
        (
            "config-default-containerd-2.1.9-debian-sid.toml",
            (2, 1, 9),
            3,
            "io.containerd.cri.v1.images",
            "io.containerd.cri.v1.images",
        ),
        (
            "config-default-containerd-2.1.9-debian-sid.toml",
            (2, 1, 9),
            2,
            "io.containerd.grpc.v1.cri",
            "io.containerd.cri.v1.images",
        ),
    ],
)
def test_drop_in_points_the_cri_registry_at_the_hosts_folder(
    path: str, version, config_version: int, plugin: str, effective: str
) -> None:
    dumped = tomllib.loads((DATA / path).read_text())
    sch = c.choose_schema(version, config_version, True)
    assert c.registry_plugins(sch) == (plugin, effective)
    source = c.effective_cri(dumped, sch) if sch.merge == "replace" else None
    text = c.render_drop_in(sch, "nvidia", NVCT, False, False, source, None, "/etc/c/certs.d")
    drop_in = tomllib.loads(text)
    assert c.toml_loads_builtin(text) == drop_in
    assert drop_in["plugins"][plugin]["registry"]["config_path"] == "/etc/c/certs.d"
    # What containerd makes of it: 1.x replaces the CRI section, 2.x merges key by key (and
    # migrates a version 2 file's registry to the images plugin).
    merged = dict(dumped, plugins=dict(dumped["plugins"]))
    if sch.merge == "replace":
        merged["plugins"][effective] = drop_in["plugins"][plugin]
    else:
        images = dict(merged["plugins"][effective])
        images["registry"] = dict(images["registry"], config_path="/etc/c/certs.d")
        merged["plugins"][effective] = images
        runtime = merged["plugins"]["io.containerd.cri.v1.runtime"]
        nvidia = drop_in["plugins"][sch.plugin_id]["containerd"]["runtimes"]["nvidia"]
        runtime["containerd"]["runtimes"]["nvidia"] = nvidia
    args = (sch, "nvidia", NVCT, False, False, None)
    assert cv.check_effective(merged, *args, "/etc/c/certs.d") == []
    assert (
        f"plugins.{effective}.registry.config_path is '', expected '/etc/c/certs.d'"
        in cv.check_effective(dumped, *args, "/etc/c/certs.d")
    )


def test_target_code_is_python_3_8_syntax(repo_root: Path) -> None:
    import ast

    relpath = "plugins/module_utils/containerd_hosts.py"
    ast.parse((repo_root / relpath).read_text(), filename=relpath, feature_version=(3, 8))
