"""containerd_runtime against the real containerd of this machine (Debian 12: containerd 1.6.20).

Nothing here touches /etc/containerd or the host's containerd service: every "live" config is a
file under tmp_path, and validation starts its scratch containerd on a private socket, root and
state directory. What is real: the containerd and ctr binaries, their config loader and their
CRI plugin, which decide whether a config works.

Needs `apt-get install containerd` (CI installs it). With KUBEGPU_CONTAINERD2_ROOT set to a
directory holding usr/bin/containerd and usr/bin/ctr of containerd 2.x (for example Debian sid's
package unpacked with dpkg-deb -x), the version 2/3 cases run against that one too.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.kubegpu.gpu.plugins.module_utils import containerd as c
from ansible_collections.kubegpu.gpu.plugins.module_utils import containerd_validate as cv
from ansible_collections.kubegpu.gpu.plugins.modules import containerd_runtime

pytestmark = pytest.mark.integration

NVCT = "/usr/bin/nvidia-container-runtime"


@pytest.fixture(scope="module")
def containerd() -> str:
    path = shutil.which("containerd")
    if not path or not shutil.which("ctr"):
        pytest.fail("containerd and ctr are needed on this machine: apt-get install containerd")
    return path


@pytest.fixture(scope="module")
def containerd2() -> Path:
    root = os.environ.get("KUBEGPU_CONTAINERD2_ROOT")
    if not root:
        pytest.skip("KUBEGPU_CONTAINERD2_ROOT not set: no containerd 2.x binary to test against")
    binary = Path(root) / "usr" / "bin" / "containerd"
    if not binary.exists():
        pytest.fail(f"KUBEGPU_CONTAINERD2_ROOT={root} has no usr/bin/containerd")
    return Path(root) / "usr" / "bin"


def sh(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, capture_output=True, text=True, env=dict(os.environ, LC_ALL="C"), check=False
    )


def run(argv: list[str]) -> tuple[int, str, str]:
    p = sh(*argv)
    return p.returncode, p.stdout, p.stderr


def dump(binary: str, config: Path) -> dict:
    p = sh(binary, "--config", str(config), "config", "dump")
    assert p.returncode == 0, p.stderr
    return tomllib.loads(p.stdout)


def default_config(binary: str) -> str:
    p = sh(binary, "config", "default")
    assert p.returncode == 0, p.stderr
    return p.stdout


def run_module(args: dict, capsys, check: bool = False, diff: bool = False) -> dict:
    record = str(Path(args["config_path"]).parent / "kubegpu_containerd.fact")
    full = dict({"record_path": record}, **args, _ansible_check_mode=check, _ansible_diff=diff)
    with patch_module_args(full), pytest.raises(SystemExit):
        containerd_runtime.main()
    return json.loads(capsys.readouterr().out)


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"<dir>"
        for p in sorted(root.rglob("*"))
    }


@contextlib.contextmanager
def own_scratch_root(factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A temporary folder of the caller's own as TMPDIR (and as tempfile's, for module code run
    in this process): the module's scratch containerd folders and processes land there, so
    leftovers() sees the caller's and never another pytest-xdist worker's. A short path under
    /tmp, since the scratch containerd's socket inside it must fit a unix socket address.
    pytest's own temporary folders are placed first, under the usual root."""
    factory.getbasetemp()
    root = Path(tempfile.mkdtemp(prefix="kg-"))
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("TMPDIR", str(root))
            patch.setattr(tempfile, "tempdir", str(root))
            yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True)
def scratch_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with own_scratch_root(tmp_path_factory) as root:
        yield root


def leftovers() -> list[str]:
    """Scratch directories and scratch containerd processes the module might have left."""
    root = tempfile.gettempdir()
    dirs = [str(p) for p in Path(root).glob("kubegpu-containerd-*")]
    procs = sh("pgrep", "-af", f"containerd --config {root}/kubegpu-containerd-").stdout
    return dirs + [p for p in procs.split("\n") if p.strip() and "pgrep" not in p]


@pytest.fixture()
def etc(tmp_path: Path) -> Path:
    d = tmp_path / "etc" / "containerd"
    d.mkdir(parents=True)
    return d


def args_for(etc: Path, binary: str, **extra) -> dict:
    return dict(
        config_path=str(etc / "config.toml"),
        drop_in_dir=str(etc / "conf.d"),
        containerd_binary=binary,
        ctr_binary=str(Path(binary).parent / "ctr"),
        # the module's record beside the config, never in the host's /etc/ansible/facts.d
        record_path=str(etc / "kubegpu_containerd.fact"),
        **extra,
    )


def runtime_of(
    effective: dict, plugin: str = "io.containerd.grpc.v1.cri", name: str = "nvidia"
) -> dict:
    return effective["plugins"][plugin]["containerd"]["runtimes"][name]


# --- the normal path ------------------------------------------------------------------------------

DEBIAN_PACKAGE_CONFIG = (
    Path(__file__).parent.parent
    / "unit"
    / "data"
    / "containerd"
    / "etc-config-debian12-package-containerd-1.6.20.toml"
)


def test_debian_package_config_gets_the_runtime_and_keeps_its_settings(
    etc: Path, containerd: str, capsys
) -> None:
    original = DEBIAN_PACKAGE_CONFIG.read_text()
    (etc / "config.toml").write_text(original)
    result = run_module(args_for(etc, containerd), capsys)
    assert result["changed"] and result["restart_required"], result
    assert result["config_changed"] and result["drop_in_changed"]
    assert result["containerd_version"] == "1.6.20"
    assert result["schema"]["merge"] == "replace"
    assert result["validation"] == {
        "dump": "ok",
        "daemon": "ok",
        "plugins": {"io.containerd.grpc.v1.cri": "ok"},
    }

    main = (etc / "config.toml").read_text()
    added = [ln for ln in main.splitlines() if ln not in original.splitlines()]
    assert added == ['imports = ["%s/*.toml"]' % (etc / "conf.d")]
    assert main.replace(added[0] + "\n", "") == original
    assert Path(result["backup_files"][0]).read_text() == original

    effective = dump(containerd, etc / "config.toml")
    assert str(etc / "conf.d" / "99-nvidia.toml") in effective["imports"]  # 1.6 lists loaded files
    nvidia = runtime_of(effective)
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"] == {"BinaryName": NVCT, "SystemdCgroup": False}
    cri = effective["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["cni"]["bin_dir"] == "/usr/lib/cni"  # the package's setting survived the drop-in
    assert cri["containerd"]["default_runtime_name"] == "runc"
    assert "runc" in cri["containerd"]["runtimes"]

    again = run_module(args_for(etc, containerd), capsys)
    assert not again["changed"] and not again["restart_required"]
    assert again["validation"] == {"dump": "not run", "daemon": "not run"}
    assert leftovers() == []


def test_systemd_cgroup_is_copied_from_runc_and_default_runtime(
    etc: Path, containerd: str, capsys
) -> None:
    text = default_config(containerd).replace("SystemdCgroup = false", "SystemdCgroup = true")
    (etc / "config.toml").write_text(text)
    result = run_module(args_for(etc, containerd, default_runtime=True), capsys)
    assert result["changed"] and result["systemd_cgroup"] is True
    assert result["systemd_cgroup_source"] == "runtimes.runc.options.SystemdCgroup"
    effective = dump(containerd, etc / "config.toml")
    assert runtime_of(effective)["options"]["SystemdCgroup"] is True
    assert runtime_of(effective, name="runc")["options"]["SystemdCgroup"] is True
    assert (
        effective["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["default_runtime_name"]
        == "nvidia"
    )


def test_rewritten_main_config_gets_only_its_imports_line_back(
    etc: Path, containerd: str, capsys
) -> None:
    """Another tool writes a fresh `containerd config default`: the next run restores the imports
    line and nothing else; the one after changes nothing."""
    fresh = default_config(containerd)
    (etc / "config.toml").write_text(fresh)
    assert run_module(args_for(etc, containerd), capsys)["changed"]
    drop_in = (etc / "conf.d" / "99-nvidia.toml").read_text()

    (etc / "config.toml").write_text(fresh)
    result = run_module(args_for(etc, containerd), capsys, diff=True)
    assert result["changed"] and result["config_changed"] and not result["drop_in_changed"]
    assert (etc / "conf.d" / "99-nvidia.toml").read_text() == drop_in
    before, after = fresh.splitlines(), (etc / "config.toml").read_text().splitlines()
    assert [a for a, b in zip(before, after, strict=True) if a != b] == ["imports = []"]
    assert [len(result["diff"]), result["diff"][0]["before_header"]] == [
        1,
        str(etc / "config.toml"),
    ]
    assert run_module(args_for(etc, containerd), capsys)["changed"] is False


def test_a_file_already_in_the_drop_in_folder_counts_from_the_first_run(
    etc: Path, containerd: str, capsys
) -> None:
    """conf.d holds a file before the main config imports the folder. On 1.x that file
    replaces the main config's CRI section once imported, so the drop-in (which carries the
    effective section) must be worked out with it on the first run; before, the second run
    rewrote the drop-in."""
    (etc / "config.toml").write_text(DEBIAN_PACKAGE_CONFIG.read_text())
    (etc / "conf.d").mkdir()
    (etc / "conf.d" / "50-logs.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  max_container_log_line_size = 8192\n'
    )
    assert run_module(args_for(etc, containerd), capsys)["changed"]
    cri = dump(containerd, etc / "config.toml")["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["max_container_log_line_size"] == 8192
    assert runtime_of(dump(containerd, etc / "config.toml"))["options"]["BinaryName"] == NVCT
    assert run_module(args_for(etc, containerd), capsys)["changed"] is False


def test_check_mode_with_diff_writes_nothing(etc: Path, containerd: str, capsys) -> None:
    (etc / "config.toml").write_text(DEBIAN_PACKAGE_CONFIG.read_text())
    before = snapshot(etc)
    result = run_module(args_for(etc, containerd), capsys, check=True, diff=True)
    assert result["changed"] and result["restart_required"]
    assert result["validation"] == {"dump": "ok", "daemon": "skipped (check mode)"}
    assert snapshot(etc) == before
    assert [d["after_header"] for d in result["diff"]] == [
        str(etc / "config.toml"),
        str(etc / "conf.d" / "99-nvidia.toml"),
    ]
    assert "nvidia" in result["diff"][1]["after"]


REGISTRY_AUTH = """
[plugins."io.containerd.grpc.v1.cri".registry.configs."registry.kubegpu.test:5000".auth]
  username = "puller"
  password = "hunter2-registry-password"
  identitytoken = "eyJ-registry-identity-token"
"""


def test_diff_never_shows_registry_credentials(etc: Path, containerd: str, capsys) -> None:
    """containerd 1.7's drop-in carries the main config's whole CRI section, registry
    credentials included: the diff shows every line of both files but their values."""
    (etc / "config.toml").write_text(DEBIAN_PACKAGE_CONFIG.read_text() + REGISTRY_AUTH)
    result = run_module(args_for(etc, containerd), capsys, check=True, diff=True)
    assert result["changed"], result
    text = json.dumps(result)
    assert "hunter2-registry-password" not in text and "eyJ-registry-identity-token" not in text
    drop_in = result["diff"][1]["after"]
    assert 'password = "<redacted>"' in drop_in and 'identitytoken = "<redacted>"' in drop_in
    assert 'username = "puller"' in drop_in and "nvidia" in drop_in
    assert 'password = "<redacted>"' in result["diff"][0]["before"]


def test_a_restart_is_owed_until_the_handler_clears_its_marker(
    etc: Path, containerd: str, capsys
) -> None:
    """The marker is written before either file changes; while it is there (the run was
    interrupted before the role's handler restarted containerd), a run with nothing to write
    still says changed and restart_required."""
    (etc / "config.toml").write_text(DEBIAN_PACKAGE_CONFIG.read_text())
    marker = etc / "restart-pending" / "containerd.json"
    args = args_for(etc, containerd, restart_marker=str(marker))
    first = run_module(args, capsys)
    assert first["changed"] and first["restart_required"]
    assert json.loads(marker.read_text()) == {
        "files": [first["drop_in_path"], str(etc / "config.toml")]
    }
    owed = run_module(args, capsys)
    assert owed["changed"] and owed["restart_required"] and owed["restart_pending"]
    assert not owed["config_changed"] and not owed["drop_in_changed"]
    marker.unlink()  # what the handler does after the restart
    settled = run_module(args, capsys)
    assert settled["changed"] is False and not marker.exists()
    refused = run_module(dict(args, restart_marker="pending.json"), capsys)
    assert (
        refused["failed"]
        and "restart_marker 'pending.json' must be an absolute path" in (refused["msg"])
    )


def test_without_a_main_config_a_minimal_one_is_created(etc: Path, containerd: str, capsys) -> None:
    result = run_module(args_for(etc, containerd), capsys)
    assert result["changed"] and result["backup_files"] == []
    assert tomllib.loads((etc / "config.toml").read_text()) == {
        "version": 2,
        "imports": [str(etc / "conf.d" / "*.toml")],
    }
    effective = dump(containerd, etc / "config.toml")
    assert runtime_of(effective)["options"]["BinaryName"] == NVCT
    assert oct((etc / "config.toml").stat().st_mode & 0o777) == "0o644"


def test_version_1_main_config(etc: Path, containerd: str, capsys) -> None:
    (etc / "config.toml").write_text(
        '[plugins.cri]\n  sandbox_image = "registry.example/pause:9"\n'
    )
    result = run_module(args_for(etc, containerd), capsys)
    assert result["changed"], result
    assert result["schema"]["config_version"] == 1 and result["config_version"] is None
    drop_in = tomllib.loads((etc / "conf.d" / "99-nvidia.toml").read_text())
    assert "version" not in drop_in and list(drop_in["plugins"]) == ["cri"]
    effective = dump(containerd, etc / "config.toml")
    assert (
        effective["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"]
        == "registry.example/pause:9"
    )
    assert runtime_of(effective)["options"]["BinaryName"] == NVCT


def test_through_ansible_with_check_and_diff(etc: Path, containerd: str, repo_root: Path) -> None:
    """The same module through `ansible` (AnsiballZ packaging of the module_utils included)."""
    (etc / "config.toml").write_text(DEBIAN_PACKAGE_CONFIG.read_text())
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(repo_root / "ansible.cfg"),
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.minimal",
    )
    ansible = str(Path(os.environ.get("VIRTUAL_ENV", "/work/venv")) / "bin" / "ansible")
    if not Path(ansible).exists():
        ansible = shutil.which("ansible") or "ansible"

    def adhoc(*extra: str) -> dict:
        p = subprocess.run(
            [
                ansible,
                "localhost",
                "-m",
                "kubegpu.gpu.containerd_runtime",
                "-a",
                json.dumps(args_for(etc, containerd)),
                *extra,
            ],
            capture_output=True,
            text=True,
            cwd=repo_root,
            env=env,
            check=False,
        )
        m = re.search(r"=> (\{.*)", p.stdout, re.S)
        assert m, p.stdout + p.stderr
        return json.loads(m.group(1))

    checked = adhoc("--check", "--diff")
    assert checked["changed"] and not (etc / "conf.d").exists()
    applied = adhoc()
    assert applied["changed"] and applied["validation"]["daemon"] == "ok"
    assert adhoc()["changed"] is False


# --- broken inputs: a clear message, and the live files untouched -----------------------------------


@pytest.mark.parametrize(
    ("main", "message"),
    [
        (
            'version = 2\n[plugins."io.containerd.grpc.v1.cri"\n',
            "containerd cannot load the configuration",
        ),
        (
            'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = \n',
            "containerd cannot load the configuration",
        ),
        ("version = 3\n", "containerd 1.6.20 cannot load"),
        ("version = 4\nimports = []\n", "has `version = 4`"),
        # Docker's containerd.io package ships a version 1 config with the CRI plugin off
        ('disabled_plugins = ["cri"]\n', "disables the CRI plugin"),
        (
            'version = 2\ndisabled_plugins = ["io.containerd.grpc.v1.cri"]\n',
            "disables the CRI plugin",
        ),
        ('version = 2\ndisabled_plugins = ["cri"]\n', 'invalid disabled plugin URI "cri"'),
    ],
)
def test_broken_main_config_is_refused_and_left_alone(
    etc: Path, containerd: str, capsys, main: str, message: str
) -> None:
    (etc / "config.toml").write_text(main)
    before = snapshot(etc)
    result = run_module(args_for(etc, containerd), capsys)
    assert result["failed"] and message in result["msg"], result
    assert result["changed"] is False and result["restart_required"] is False
    assert snapshot(etc) == before
    assert leftovers() == []


def test_drop_in_dir_that_is_a_file(etc: Path, containerd: str, capsys) -> None:
    (etc / "config.toml").write_text(DEBIAN_PACKAGE_CONFIG.read_text())
    (etc / "conf.d").write_text("# someone's notes\n")
    before = snapshot(etc)
    result = run_module(args_for(etc, containerd), capsys)
    assert result["failed"] and "is not a directory" in result["msg"]
    assert snapshot(etc) == before


def test_a_later_drop_in_that_replaces_the_cri_section_is_named(
    etc: Path, containerd: str, capsys
) -> None:
    """On 1.x the last file that sets the CRI section wins: one sorting after ours hides nvidia."""
    (etc / "config.toml").write_text(default_config(containerd))
    (etc / "conf.d").mkdir()
    later = etc / "conf.d" / "zz-registry.toml"
    later.write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "/etc/containerd/certs.d"\n'
    )
    before = snapshot(etc)
    result = run_module(args_for(etc, containerd), capsys)
    assert result["failed"], result
    assert "has no plugins.io.containerd.grpc.v1.cri.containerd.runtimes.nvidia" in result["msg"]
    assert str(later) in result["msg"]
    assert snapshot(etc) == before


# --- validation itself, on candidates the renderer would never write --------------------------------


def candidate_setup(etc: Path, containerd: str) -> tuple[tuple, c.Schema, str]:
    main = default_config(containerd)
    (etc / "config.toml").write_text(main)
    version = c.parse_containerd_version(sh(containerd, "--version").stdout)
    return (
        version,
        c.choose_schema(version, 2, True),
        c.add_import(main, str(etc / "conf.d" / "*.toml")),
    )


def validate(etc: Path, containerd: str, drop_in: str, start_daemon: bool = True) -> dict:
    version, schema, main = candidate_setup(etc, containerd)
    return cv.validate_candidate(
        run, containerd, "ctr", version, schema, str(etc / "config.toml"), main,
        str(etc / "conf.d" / "99-nvidia.toml"), drop_in, "nvidia", NVCT, False, False, start_daemon=start_daemon,
    )  # fmt: skip


def rendered(etc: Path, containerd: str) -> str:
    _version, schema, _main = candidate_setup(etc, containerd)
    effective = dump(containerd, etc / "config.toml")
    return c.render_drop_in(
        schema, "nvidia", NVCT, False, False, c.effective_cri(effective, schema)
    )


def test_validation_passes_for_the_rendered_drop_in(etc: Path, containerd: str) -> None:
    live = snapshot(etc.parent)
    report = validate(etc, containerd, rendered(etc, containerd))
    assert report == {"dump": "ok", "daemon": "ok", "plugins": {"io.containerd.grpc.v1.cri": "ok"}}
    assert snapshot(etc.parent) != live  # only the main config written by candidate_setup
    assert not (etc / "conf.d").exists()
    assert leftovers() == []


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda t: t.replace("[plugins.", "[plugins..", 1), "does not load"),
        # a drop-in in containerd 2.x's layout (version 3): 1.6 keeps version 2 and ignores the
        # unknown plugin section, so the runtime is simply not there
        (
            lambda t: c.render_drop_in(
                c.choose_schema((2, 1, 9), 3, True), "nvidia", NVCT, False, False
            ),
            "the effective config has no plugins.io.containerd.grpc.v1.cri.containerd.runtimes.nvidia",
        ),
        (
            lambda t: t.replace(f'BinaryName = "{NVCT}"', 'BinaryName = "/usr/bin/runc"'),
            "BinaryName is '/usr/bin/runc'",
        ),
        # a config that `config dump` accepts but the CRI plugin refuses: only the daemon sees it
        (
            lambda t: t.replace(
                'stream_idle_timeout = "4h0m0s"', 'stream_idle_timeout = "four hours"'
            ),
            "did not come up with the CRI plugin ok",
        ),
        # the naive drop-in: only the nvidia runtime, which on 1.x removes runc
        (
            lambda t: (
                'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n  runtime_type = "io.containerd.runc.v2"\n  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n    BinaryName = "'
                + NVCT
                + '"\n'
            ),
            "default_runtime_name 'runc' names no configured runtime",
        ),
    ],
)
def test_validation_fails_and_nothing_is_written(
    etc: Path, containerd: str, mangle, message: str
) -> None:
    drop_in = mangle(rendered(etc, containerd))
    live = snapshot(etc.parent)
    with pytest.raises(c.ContainerdConfigError, match=re.escape(message)):
        validate(etc, containerd, drop_in)
    assert snapshot(etc.parent) == live
    assert leftovers() == []


def test_naive_drop_in_breaks_the_cri_plugin_on_1x(
    etc: Path, containerd: str, tmp_path: Path
) -> None:
    """Why the 1.x drop-in carries the CRI section: the real containerd with an nvidia-only drop-in."""
    (etc / "conf.d").mkdir()
    (etc / "config.toml").write_text(
        c.add_import(default_config(containerd), str(etc / "conf.d" / "*.toml"))
    )
    (etc / "conf.d" / "99-nvidia.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n  runtime_type = "io.containerd.runc.v2"\n'
    )
    work = tmp_path / "scratch"
    work.mkdir()
    version = c.parse_containerd_version(sh(containerd, "--version").stdout)
    result = cv.run_scratch_containerd(
        run, containerd, "ctr", str(etc / "config.toml"), str(work), version
    )
    assert result["ok"] is False
    assert result["plugins"] == {"io.containerd.grpc.v1.cri": "error"}
    assert "no corresponding runtime configured" in result["message"]


# --- containerd 2.x, when a binary is provided ------------------------------------------------------


@pytest.mark.parametrize(
    ("main_kind", "plugin", "version"),
    [("default", "io.containerd.cri.v1.runtime", 3), ("debian-v2", "io.containerd.grpc.v1.cri", 2)],
)
def test_containerd_2x(
    etc: Path, containerd2: Path, capsys, main_kind: str, plugin: str, version: int
) -> None:
    binary = str(containerd2 / "containerd")
    nri_before = Path("/var/run/nri").exists()
    main = default_config(binary) if main_kind == "default" else DEBIAN_PACKAGE_CONFIG.read_text()
    if main_kind == "default":
        main = main.replace("SystemdCgroup = false", "SystemdCgroup = true")
    (etc / "config.toml").write_text(main)
    result = run_module(args_for(etc, binary), capsys)
    assert result["changed"], result
    assert result["schema"] == {
        "config_version": version,
        "plugin": plugin,
        "merge": "deep",
        "effective_plugin": "io.containerd.cri.v1.runtime",
    }
    assert set(result["validation"]["plugins"].values()) == {"ok"}
    drop_in = tomllib.loads((etc / "conf.d" / "99-nvidia.toml").read_text())
    assert drop_in["version"] == version and list(drop_in["plugins"][plugin]["containerd"]) == [
        "runtimes"
    ]
    effective = dump(binary, etc / "config.toml")
    nvidia = runtime_of(effective, "io.containerd.cri.v1.runtime")
    assert nvidia["options"]["BinaryName"] == NVCT
    assert nvidia["options"]["SystemdCgroup"] is (main_kind == "default")
    if main_kind == "debian-v2":  # the package's CNI directory is kept
        assert effective["plugins"]["io.containerd.cri.v1.runtime"]["cni"]["bin_dirs"] == [
            "/usr/lib/cni"
        ]
    assert run_module(args_for(etc, binary), capsys)["changed"] is False
    assert Path("/var/run/nri").exists() == nri_before  # the scratch's NRI socket went elsewhere
    assert leftovers() == []


def test_containerd_2x_with_a_higher_drop_in_version_loses_main_settings(
    etc: Path, containerd2: Path
) -> None:
    """Why the drop-in takes the main config's version: containerd 2.1 loads a version 3 drop-in
    under a version 2 main config without an error, but then leaves the main config's CRI
    settings unmigrated (here the Debian package's CNI bin_dir). The matched drop-in keeps them.
    (containerd 2.3 refused such a drop-in for a while; see DESIGN.md.)"""
    binary = str(containerd2 / "containerd")
    (etc / "conf.d").mkdir()
    main = c.add_import(DEBIAN_PACKAGE_CONFIG.read_text(), str(etc / "conf.d" / "*.toml"))
    (etc / "config.toml").write_text(main)
    version = c.parse_containerd_version(sh(binary, "--version").stdout)
    results = {}
    for config_version in (3, 2):
        drop_in = c.render_drop_in(
            c.choose_schema(version, config_version, True), "nvidia", NVCT, False, False
        )
        (etc / "conf.d" / "99-nvidia.toml").write_text(drop_in)
        effective = dump(binary, etc / "config.toml")
        assert (
            runtime_of(effective, "io.containerd.cri.v1.runtime")["options"]["BinaryName"] == NVCT
        )
        results[config_version] = effective["plugins"]["io.containerd.cri.v1.runtime"]["cni"][
            "bin_dirs"
        ]
    assert results[2] == ["/usr/lib/cni"]
    assert results[3] != ["/usr/lib/cni"]


# --- Docker's daemon.json, with a real dockerd when one is provided ---------------------------------


@pytest.fixture(scope="module")
def dockerd() -> str:
    """A dockerd that has --validate (Docker 23+; Debian 12's docker.io 20.10 has not), for
    example Debian sid's docker.io unpacked with dpkg-deb -x: KUBEGPU_DOCKERD_ROOT=<that dir>."""
    root = os.environ.get("KUBEGPU_DOCKERD_ROOT")
    if not root:
        pytest.skip("KUBEGPU_DOCKERD_ROOT not set: no dockerd with --validate to test against")
    binary = Path(root) / "usr" / "sbin" / "dockerd"
    if not binary.exists():
        pytest.fail(f"KUBEGPU_DOCKERD_ROOT={root} has no usr/sbin/dockerd")
    return str(binary)


def test_dockerd_accepts_the_merge_and_refuses_a_bad_file(
    tmp_path: Path, dockerd: str, fixtures_real: Path, capsys, monkeypatch
) -> None:
    from ansible_collections.kubegpu.gpu.plugins.modules import docker_runtime

    # dockerd looks for docker-proxy on PATH; it sits beside dockerd in the unpacked package
    monkeypatch.setenv("PATH", str(Path(dockerd).parent) + os.pathsep + os.environ["PATH"])
    path = tmp_path / "daemon.json"
    original = (
        fixtures_real / "runtime-config" / "docker-daemon-nvidia-ctk-generated-nvct-378.json"
    ).read_text()
    path.write_text(original)

    def module(args: dict) -> dict:
        record = str(tmp_path / "kubegpu_docker.fact")
        full = dict(args, dockerd_binary=dockerd, record_path=record)
        with patch_module_args(full), pytest.raises(SystemExit):
            docker_runtime.main()
        return json.loads(capsys.readouterr().out)

    result = module({"path": str(path), "default_runtime": True})
    assert result["changed"] and result["validation"] == "ok", result
    assert json.loads(path.read_text())["default-runtime"] == "nvidia"

    path.write_text('{"log-level": "loud"}\n')
    result = module({"path": str(path)})
    assert result["failed"] and "invalid logging level: loud" in result["msg"]
    assert str(path) + " (merged)" in result["msg"] and result["validation"] == "failed"
    assert path.read_text() == '{"log-level": "loud"}\n'
