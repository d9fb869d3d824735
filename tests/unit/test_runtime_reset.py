"""Undoing exactly what kubegpu did to a runtime's config (the reset path): pure logic, and the
containerd_runtime and docker_runtime modules with state=absent on files in a temporary folder
(neither needs containerd or dockerd for that).

The main configs are real: Debian's packaged containerd config and containerd's own defaults
(tests/unit/data/containerd), with kubegpu's imports entry added the way the module adds it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.kubegpu.gpu.plugins.module_utils import containerd as c
from ansible_collections.kubegpu.gpu.plugins.module_utils import containerd_reset as cr
from ansible_collections.kubegpu.gpu.plugins.module_utils import docker_daemon as d
from ansible_collections.kubegpu.gpu.plugins.modules import containerd_runtime, docker_runtime

DATA = Path(__file__).parent / "data" / "containerd"
DEBIAN_ETC = DATA / "etc-config-debian12-package-containerd-1.6.20.toml"
DEFAULT_17 = DATA / "config-default-containerd-1.7.24-debian13.toml"
DEFAULT_21 = DATA / "config-default-containerd-2.1.9-debian-sid.toml"
ENTRY = "/etc/containerd/conf.d/*.toml"
NVCT = "/usr/bin/nvidia-container-runtime"


# --- containerd: remove_import -----------------------------------------------------------------------

REMOVALS = [
    (
        "own line",
        f'version = 2\nimports = ["{ENTRY}"]\n\n[a]\nb = 1\n',
        True,
        "version = 2\n\n[a]\nb = 1\n",
    ),
    ("keep empty", f'version = 2\nimports = ["{ENTRY}"]\n', False, "version = 2\nimports = []\n"),
    ("last inline", f'imports = ["/x.toml", "{ENTRY}"]\n', True, 'imports = ["/x.toml"]\n'),
    ("first inline", f'imports = ["{ENTRY}", "/x.toml"]\n', True, 'imports = ["/x.toml"]\n'),
    (
        "multi-line trailing comma",
        f'imports = [\n  "/x.toml",\n  "{ENTRY}",\n]\n',
        True,
        'imports = [\n  "/x.toml",\n]\n',
    ),
    (
        "multi-line no trailing comma",
        f'imports = [\n  "/x.toml",\n  "{ENTRY}"\n]\n',
        True,
        'imports = [\n  "/x.toml"\n]\n',
    ),
    ("crlf", f'version = 2\r\nimports = ["{ENTRY}"]\r\n[a]\r\n', True, "version = 2\r\n[a]\r\n"),
    ("absent", 'imports = ["/x.toml"]\n', True, 'imports = ["/x.toml"]\n'),
]


@pytest.mark.parametrize(
    ("name", "text", "drop", "expected"), REMOVALS, ids=[r[0] for r in REMOVALS]
)
def test_remove_import_takes_out_only_the_entry(
    name: str, text: str, drop: bool, expected: str
) -> None:
    assert cr.remove_import(text, ENTRY, drop) == expected


@pytest.mark.parametrize("path", [DEBIAN_ETC, DEFAULT_17, DEFAULT_21])
def test_add_then_remove_gives_back_every_byte_of_real_configs(path: Path) -> None:
    text = path.read_text()
    had_line = c.scan_top_level(text)["imports"] is not None
    added = c.add_import(text, ENTRY)
    assert added != text
    assert cr.remove_import(added, ENTRY, drop_line_if_empty=not had_line) == text


# --- containerd: the record and plan_removal -------------------------------------------------------------


def planned(before: str | None, after: str) -> dict:
    return {
        "main_path": "/etc/containerd/config.toml",
        "drop_in_path": "/etc/containerd/conf.d/99-nvidia.toml",
        "import_entry": ENTRY,
        "main_before": before,
        "main_after": after,
    }


def test_record_says_whether_the_line_or_the_file_was_added() -> None:
    debian = DEBIAN_ETC.read_text()  # no imports line
    rec = cr.record_after_apply(None, planned(debian, c.add_import(debian, ENTRY)), True)
    assert (rec["import_added"], rec["imports_line_added"], rec["config_created"]) == (
        True,
        True,
        False,
    )
    # Another tool re-renders with `imports = []`: the latest add is into an existing line.
    fresh = DEFAULT_17.read_text()
    rec = cr.record_after_apply(rec, planned(fresh, c.add_import(fresh, ENTRY)), True)
    assert (rec["import_added"], rec["imports_line_added"]) == (True, False)
    # A run that only changes the drop-in keeps what the record says.
    assert cr.record_after_apply(rec, planned(fresh, fresh), False) == rec
    created = cr.record_after_apply(None, planned(None, "version = 2\n"), True)
    assert created["config_created"] and created["imports_line_added"]


def test_removal_keeps_every_later_change_of_the_user() -> None:
    debian = DEBIAN_ETC.read_text()
    ours = c.add_import(debian, ENTRY)
    rec = cr.record_after_apply(None, planned(debian, ours), True)
    later = ours.replace('conf_dir = "/etc/cni/net.d"', 'conf_dir = "/etc/cni/custom.d"')
    action, text, why = cr.plan_removal(later, rec, ENTRY)
    assert action == "edit" and "recorded" in why
    assert text == debian.replace('conf_dir = "/etc/cni/net.d"', 'conf_dir = "/etc/cni/custom.d"')


def test_removal_keeps_an_entry_that_was_there_before() -> None:
    text = f'version = 3\nimports = ["{ENTRY}"]\n'
    rec = cr.record_after_apply(None, planned(text, text), False)
    assert cr.plan_removal(text, rec, ENTRY)[0] == "keep"
    # Without a record: no backup either, so nothing says kubegpu added it.
    assert cr.plan_removal(text, None, ENTRY)[0] == "keep"


def test_removal_without_a_record_reads_the_oldest_backup() -> None:
    debian = DEBIAN_ETC.read_text()
    ours = c.add_import(debian, ENTRY)
    action, text, why = cr.plan_removal(ours, None, ENTRY, oldest_backup_text=debian)
    assert (action, text) == ("edit", debian) and "oldest backup" in why
    assert cr.plan_removal(ours, None, ENTRY, oldest_backup_text=ours)[0] == "keep"


def test_a_main_config_kubegpu_created_goes_only_when_nothing_else_is_in_it() -> None:
    schema = c.Schema(2, "io.containerd.grpc.v1.cri", "replace", "io.containerd.grpc.v1.cri", True)
    created = c.minimal_main_config(schema, ENTRY)
    rec = cr.record_after_apply(None, planned(None, created), True)
    assert cr.plan_removal(created, rec, ENTRY)[0] == "remove"
    grown = created + '\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "pause:3.10"\n'
    action, text, _ = cr.plan_removal(grown, rec, ENTRY)
    assert action == "edit" and "imports" not in text and "pause:3.10" in text


# --- the containerd module with state=absent --------------------------------------------------------------


def run_module(module, args: dict, capsys) -> dict:
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    return json.loads(capsys.readouterr().out)


def containerd_layout(tmp_path: Path, main: str, drop_in: str | None) -> dict:
    conf_d = tmp_path / "conf.d"
    conf_d.mkdir()
    (tmp_path / "config.toml").write_text(main)
    if drop_in is not None:
        (conf_d / "99-nvidia.toml").write_text(drop_in)
    return {
        "config_path": str(tmp_path / "config.toml"),
        "drop_in_dir": str(conf_d),
        "record_path": str(tmp_path / "facts.d" / "kubegpu_containerd.fact"),
        "state": "absent",
    }


@pytest.mark.parametrize("mode", ["check", "real"])
def test_containerd_module_absent(tmp_path: Path, capsys, mode: str) -> None:
    debian = DEBIAN_ETC.read_text()
    entry = str(tmp_path / "conf.d" / "*.toml")
    ours = c.add_import(debian, entry)
    later = ours + "\n# the operator's note, added after kubegpu\n"
    args = containerd_layout(
        tmp_path, later, f"# {c.MANAGED_MARK}. Changes here are overwritten.\n"
    )
    record = planned(debian, ours)
    record.update(main_path=args["config_path"], import_entry=entry)
    Path(args["record_path"]).parent.mkdir()
    Path(args["record_path"]).write_text(json.dumps(cr.record_after_apply(None, record, True)))
    extra = {"_ansible_check_mode": True, "_ansible_diff": True} if mode == "check" else {}
    result = run_module(containerd_runtime, dict(args, **extra), capsys)
    assert result["changed"] and result["removal"]["main_config"] == "edit"
    assert result["removal"]["drop_in"] == "removed"
    if mode == "check":
        assert Path(args["config_path"]).read_text() == later
        assert (tmp_path / "conf.d" / "99-nvidia.toml").exists()
        assert (
            result["diff"][0]["after"] == debian + "\n# the operator's note, added after kubegpu\n"
        )
        return
    assert (
        Path(args["config_path"]).read_text()
        == debian + "\n# the operator's note, added after kubegpu\n"
    )
    assert not (tmp_path / "conf.d" / "99-nvidia.toml").exists()
    assert not Path(args["record_path"]).exists()
    assert len(result["backup_files"]) == 1
    again = run_module(containerd_runtime, args, capsys)
    assert again["changed"] is False


def test_containerd_module_absent_leaves_a_foreign_drop_in(tmp_path: Path, capsys) -> None:
    args = containerd_layout(tmp_path, "version = 2\n", "# someone else's\nversion = 2\n")
    result = run_module(containerd_runtime, args, capsys)
    assert result["changed"] is False
    assert result["removal"]["drop_in"] == "kept (not kubegpu's)"
    assert (tmp_path / "conf.d" / "99-nvidia.toml").exists()


# --- docker -------------------------------------------------------------------------------------------------

USER_DAEMON = '{\n  "iptables": false,\n  "log-level": "warn",\n  "storage-driver": "vfs"\n}\n'


def merge_and_record(old: str | None, default_runtime: bool, record: dict | None = None):
    new, changed = d.plan_daemon_json(old, "nvidia", NVCT, default_runtime)
    assert changed
    return new, d.record_after_merge(record, old, "nvidia", NVCT, default_runtime, "daemon.json")


def test_docker_reset_takes_out_only_kubegpus_keys() -> None:
    new, rec = merge_and_record(USER_DAEMON, True)
    later = json.loads(new)
    later["debug"] = True  # the user's change after kubegpu
    action, text, undone = d.plan_reset(json.dumps(later, indent=2) + "\n", rec)
    assert action == "edit"
    assert json.loads(text) == dict(json.loads(USER_DAEMON), debug=True)
    assert undone == ["removed runtimes.nvidia", "removed default-runtime"]
    assert text.startswith('{\n  "iptables"')  # the file's indentation


def test_docker_reset_puts_back_what_the_user_had() -> None:
    old = '{"default-runtime": "runc", "runtimes": {"nvidia": {"path": "/opt/nvct"}, "kata": {"path": "/k"}}}'
    new, rec = merge_and_record(old, True)
    action, text, _ = d.plan_reset(new, rec)
    assert action == "edit" and json.loads(text) == json.loads(old)


def test_docker_reset_leaves_a_runtime_someone_changed_since() -> None:
    new, rec = merge_and_record(USER_DAEMON, False)
    changed = json.loads(new)
    changed["runtimes"]["nvidia"]["path"] = "/opt/other"
    assert d.plan_reset(json.dumps(changed), rec)[0] == "keep"


def test_docker_reset_removes_a_file_kubegpu_created_and_keeps_the_first_before() -> None:
    new, rec = merge_and_record(None, False)
    # A second change (default runtime now) keeps what the file held before the first one.
    newer, rec2 = merge_and_record(new, True, rec)
    assert rec2["file_created"] and rec2["runtime_before"] is None and rec2["default_runtime_set"]
    assert d.plan_reset(newer, rec2)[0] == "remove"
    assert d.plan_reset(newer, None) == ("keep", newer, [])


def test_docker_module_present_then_absent(tmp_path: Path, capsys) -> None:
    path = tmp_path / "daemon.json"
    path.write_text(USER_DAEMON)
    args = {
        "path": str(path),
        "record_path": str(tmp_path / "facts.d" / "kubegpu_docker.fact"),
        "validate": False,
        "default_runtime": True,
    }
    first = run_module(docker_runtime, args, capsys)
    assert first["changed"] and json.loads(path.read_text())["runtimes"]["nvidia"]["path"] == NVCT
    assert json.loads(Path(args["record_path"]).read_text())["default_runtime_set"] is True
    assert run_module(docker_runtime, args, capsys)["changed"] is False
    check = run_module(docker_runtime, dict(args, state="absent", _ansible_check_mode=True), capsys)
    assert check["changed"] and "nvidia" in path.read_text()
    gone = run_module(docker_runtime, dict(args, state="absent"), capsys)
    assert gone["changed"] and gone["undone"] == [
        "removed runtimes.nvidia",
        "removed default-runtime",
        "removed features.cdi",
    ]
    assert json.loads(path.read_text()) == json.loads(USER_DAEMON)
    assert not Path(args["record_path"]).exists()
    assert run_module(docker_runtime, dict(args, state="absent"), capsys)["changed"] is False
