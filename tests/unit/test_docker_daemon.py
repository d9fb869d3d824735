"""Unit tests for the Docker daemon.json merge (module_utils/docker_daemon.py) and the
docker_runtime module, run in-process in normal, check and diff mode and on its error paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.kubegpu.gpu.plugins.module_utils import docker_daemon as d
from ansible_collections.kubegpu.gpu.plugins.modules import docker_runtime

NVCT = "/usr/bin/nvidia-container-runtime"


@pytest.fixture(scope="module")
def nvct_daemon_json(fixtures_real: Path) -> str:
    return (
        fixtures_real / "runtime-config" / "docker-daemon-nvidia-ctk-generated-nvct-378.json"
    ).read_text()


# --- the merge ------------------------------------------------------------------------------------


def test_merge_into_the_file_nvidia_ctk_wrote(nvct_daemon_json: str) -> None:
    """nvidia-ctk wrote a relative path and `args`; the path is set, `args` kept, 4-space indent."""
    text, changed = d.plan_daemon_json(nvct_daemon_json, "nvidia", NVCT, False)
    assert changed
    assert json.loads(text) == {"runtimes": {"nvidia": {"args": [], "path": NVCT}}}
    assert text == nvct_daemon_json.replace('"nvidia-container-runtime"', '"' + NVCT + '"')
    again, changed_again = d.plan_daemon_json(text, "nvidia", NVCT, False)
    assert (again, changed_again) == (text, False)


def test_the_same_data_is_never_rewritten(nvct_daemon_json: str) -> None:
    """The file already names nvidia-container-runtime (Docker finds it on PATH): nothing to do."""
    assert d.plan_daemon_json(nvct_daemon_json, "nvidia", "nvidia-container-runtime", False) == (
        nvct_daemon_json,
        False,
    )


USER_JSON = """{
  "log-driver": "json-file",
  "log-opts": {"max-size": "10m", "max-file": "3"},
  "registry-mirrors": ["https://mirror.example.internal"],
  "runtimes": {
    "runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--platform=systrap"]}
  },
  "data-root": "/srv/docker",
  "labels": ["zone=é"]
}
"""


@pytest.mark.parametrize("default_runtime", [False, True])
def test_merge_keeps_every_other_key_in_order(default_runtime: bool) -> None:
    text, changed = d.plan_daemon_json(USER_JSON, "nvidia", NVCT, default_runtime)
    assert changed
    before, after = json.loads(USER_JSON), json.loads(text)
    expected_keys = list(before) + (["default-runtime"] if default_runtime else [])
    assert list(after) == expected_keys
    for key in before:
        if key != "runtimes":
            assert after[key] == before[key]
    assert after["runtimes"] == {"runsc": before["runtimes"]["runsc"], "nvidia": {"path": NVCT}}
    assert after.get("default-runtime") == ("nvidia" if default_runtime else None)
    assert '\n  "log-driver"' in text  # the file's two-space indent
    assert "zone=é" in text  # not escaped


def test_default_runtime_false_leaves_an_existing_default() -> None:
    text = '{"default-runtime": "runsc", "runtimes": {"nvidia": {"path": "' + NVCT + '"}}}'
    assert d.plan_daemon_json(text, "nvidia", NVCT, False) == (text, False)
    new, changed = d.plan_daemon_json(text, "nvidia", NVCT, True)
    assert changed and json.loads(new)["default-runtime"] == "nvidia"
    assert "\n" not in new.strip()  # a one-line file stays one line


@pytest.mark.parametrize(
    ("text", "indent"),
    [
        ('{\n    "a": 1\n}\n', 4),
        ('{\n  "a": 1\n}\n', 2),
        ('{\n\t"a": 1\n}\n', "\t"),
        ('{"a": 1}', None),
        ("{}", 4),
        ("{\n}\n", 4),
    ],
)
def test_detect_indent(text: str, indent) -> None:
    assert d.detect_indent(text) == indent


@pytest.mark.parametrize("old", [None, "", "  \n"])
def test_new_or_empty_file(old) -> None:
    text, changed = d.plan_daemon_json(old, "nvidia", NVCT, False)
    assert changed
    assert (
        text
        == '{\n    "runtimes": {\n        "nvidia": {\n            "path": "'
        + NVCT
        + '"\n        }\n    }\n}\n'
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"runtimes": {', "is not valid JSON"),
        ("[1, 2]", "holds a JSON list"),
        ('{"runtimes": ["nvidia"]}', "`runtimes` is a JSON list"),
        ('{"runtimes": {"nvidia": "/usr/bin/x"}}', "`runtimes.nvidia` is a JSON str"),
    ],
)
def test_bad_daemon_json_is_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(d.DockerDaemonError, match=message) as err:
        d.plan_daemon_json(text, "nvidia", NVCT, False, "/etc/docker/daemon.json")
    assert "/etc/docker/daemon.json" in str(err.value)


# --- the module, in-process -----------------------------------------------------------------------


def run_module(args: dict, check: bool = False, diff: bool = False, capsys=None) -> dict:
    # The module's record goes beside the file, never to the host's /etc/ansible/facts.d.
    record = str(Path(args["path"]).parent / "kubegpu_docker.fact")
    full = dict({"record_path": record}, **args, _ansible_check_mode=check, _ansible_diff=diff)
    with patch_module_args(full), pytest.raises(SystemExit):
        docker_runtime.main()
    return json.loads(capsys.readouterr().out)


def test_module_normal_then_idempotent(tmp_path: Path, capsys, nvct_daemon_json: str) -> None:
    path = tmp_path / "daemon.json"
    path.write_text(nvct_daemon_json)
    args = {"path": str(path)}
    first = run_module(args, capsys=capsys)
    assert first["validation"] == "skipped (dockerd not found)"
    assert first["changed"] and first["restart_required"]
    assert json.loads(path.read_text())["runtimes"]["nvidia"]["path"] == NVCT
    assert Path(first["backup_file"]).read_text() == nvct_daemon_json
    second = run_module(args, capsys=capsys)
    assert not second["changed"] and not second["restart_required"]
    assert second["validation"] == "not run"


def test_module_check_and_diff_change_nothing(tmp_path: Path, capsys) -> None:
    path = tmp_path / "etc" / "docker" / "daemon.json"
    result = run_module(
        {"path": str(path), "default_runtime": True}, check=True, diff=True, capsys=capsys
    )
    assert result["changed"] and result["restart_required"]
    assert not path.exists() and not path.parent.exists()
    assert result["diff"]["before"] == ""
    # No dockerd here to tell its version: the cdi feature is set, which every Docker accepts.
    assert result["cdi"] == {
        "enabled": True,
        "source": "daemon.json (kubegpu)",
        "docker_version": None,
    }
    assert json.loads(result["diff"]["after"]) == {
        "features": {"cdi": True},
        "runtimes": {"nvidia": {"path": NVCT}},
        "default-runtime": "nvidia",
    }


def test_module_creates_the_file_and_directory(tmp_path: Path, capsys) -> None:
    path = tmp_path / "etc" / "docker" / "daemon.json"
    result = run_module({"path": str(path), "validate": False}, capsys=capsys)
    assert result["changed"] and result["validation"] == "skipped (validate: false)"
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert "backup_file" not in result


def test_module_refuses_bad_json_and_leaves_it(tmp_path: Path, capsys) -> None:
    path = tmp_path / "daemon.json"
    path.write_text('{"log-driver": "json-file",}')
    result = run_module({"path": str(path)}, capsys=capsys)
    assert result["failed"] and "is not valid JSON" in result["msg"]
    assert path.read_text() == '{"log-driver": "json-file",}'
    assert list(tmp_path.iterdir()) == [path]


def test_module_refuses_a_directory(tmp_path: Path, capsys) -> None:
    result = run_module({"path": str(tmp_path)}, capsys=capsys)
    assert result["failed"] and "not a regular file" in result["msg"]


def test_module_refuses_a_missing_dockerd_binary(tmp_path: Path, capsys) -> None:
    path = tmp_path / "daemon.json"
    result = run_module(
        {"path": str(path), "dockerd_binary": str(tmp_path / "dockerd")}, capsys=capsys
    )
    assert result["failed"] and "does not exist" in result["msg"]
    assert not path.exists()


def test_documentation_matches_the_argument_spec(monkeypatch) -> None:
    import yaml

    seen = {}

    class Captured(Exception):
        pass

    def fake(**kwargs):
        seen.update(kwargs)
        raise Captured

    monkeypatch.setattr(docker_runtime, "AnsibleModule", fake)
    with pytest.raises(Captured):
        docker_runtime.main()
    doc = yaml.safe_load(docker_runtime.DOCUMENTATION)
    yaml.safe_load(docker_runtime.EXAMPLES)
    assert "restart_required" in yaml.safe_load(docker_runtime.RETURN)
    assert set(doc["options"]) == set(seen["argument_spec"])
    for name, option in seen["argument_spec"].items():
        assert doc["options"][name]["type"] == option["type"], name
        assert doc["options"][name].get("default") == option.get("default"), name


# --- CDI: the cdi feature, by Docker version ---------------------------------------------------


@pytest.mark.parametrize(
    ("config", "version", "cdi", "set_cdi", "source"),
    [
        ({}, (26, 1, 5), True, True, "daemon.json (kubegpu)"),  # 25.0-28.1 need the feature
        ({}, (25, 0, 0), True, True, "daemon.json (kubegpu)"),
        ({}, (28, 1, 1), True, True, "daemon.json (kubegpu)"),
        ({}, (28, 2, 0), True, False, "docker default"),  # on by default from 28.2
        ({"features": {"cdi": False}}, (28, 5, 1), True, True, "daemon.json (kubegpu)"),
        ({"features": {"cdi": True}}, (26, 1, 5), True, False, "daemon.json"),
        ({}, None, True, True, "daemon.json (kubegpu)"),  # version unknown: set it
        ({}, (20, 10, 24), True, False, "unsupported"),  # no CDI before 25.0
        ({}, (26, 1, 5), False, False, "not managed (cdi false)"),
    ],
)
def test_cdi_plan(config: dict, version, cdi: bool, set_cdi: bool, source: str) -> None:
    got, state, warnings = d.cdi_plan(config, version, cdi)
    assert (got, state["source"]) == (set_cdi, source)
    assert state["enabled"] is (source not in ("unsupported", "not managed (cdi false)"))
    assert bool(warnings) is (source == "unsupported")
    if warnings:
        assert "Docker 20.10.24 has no CDI support" in warnings[0]


def test_cdi_feature_is_merged_recorded_and_undone() -> None:
    old = json.dumps({"features": {"buildkit": True}, "log-level": "warn"}, indent=2) + "\n"
    new, changed = d.plan_daemon_json(old, "nvidia", NVCT, False, cdi=True)
    assert changed
    assert json.loads(new) == {
        "features": {"buildkit": True, "cdi": True},
        "log-level": "warn",
        "runtimes": {"nvidia": {"path": NVCT}},
    }
    record = d.record_after_merge(None, old, "nvidia", NVCT, False, "daemon.json", cdi=True)
    assert (record["cdi_set"], record["cdi_before"], record["features_key_added"]) == (
        True,
        {"missing": True},
        False,
    )
    action, text, undone = d.plan_reset(new, record)
    assert action == "edit" and json.loads(text) == json.loads(old)
    assert undone == ["removed runtimes.nvidia", "removed features.cdi"]
    # An explicit false the operator had is put back, and a features key kubegpu added goes.
    off = json.dumps({"features": {"cdi": False}})
    new, _ = d.plan_daemon_json(off, "nvidia", NVCT, False, cdi=True)
    record = d.record_after_merge(None, off, "nvidia", NVCT, False, "daemon.json", cdi=True)
    assert json.loads(d.plan_reset(new, record)[1]) == {"features": {"cdi": False}}
    new, _ = d.plan_daemon_json(None, "nvidia", NVCT, False, cdi=True)
    record = d.record_after_merge(None, None, "nvidia", NVCT, False, "daemon.json", cdi=True)
    assert d.plan_reset(new, record)[0] == "remove"


def test_cdi_feature_needs_features_to_be_an_object() -> None:
    with pytest.raises(d.DockerDaemonError, match="`features` is a JSON list"):
        d.plan_daemon_json('{"features": []}', "nvidia", NVCT, False, cdi=True)
