"""The containerd_runtime module's refusals that come before containerd is asked anything.

Everything that needs containerd itself (normal, check and diff mode, idempotence, validation)
runs against the real binary in tests/integration/test_containerd_host.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.kubegpu.gpu.plugins.modules import containerd_runtime


def run_module(args: dict, capsys) -> dict:
    with patch_module_args(args), pytest.raises(SystemExit):
        containerd_runtime.main()
    return json.loads(capsys.readouterr().out)


def paths(tmp_path: Path) -> dict:
    return {
        "config_path": str(tmp_path / "config.toml"),
        "drop_in_dir": str(tmp_path / "conf.d"),
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"runtime_name": "Nvidia"}, "runtime_name 'Nvidia' is not a valid RuntimeClass handler"),
        ({"runtime_name": "nvidia_cdi"}, "lowercase letters, digits and '-'"),
        ({"runtime_binary": "nvidia-container-runtime"}, "must be an absolute path"),
        ({"validate_timeout": 0}, "validate_timeout must be at least 1"),
        (
            {"containerd_binary": "/nonexistent/containerd"},
            "containerd is not installed on this host",
        ),
        (
            {"drop_in_name": "99-nvidia.conf", "containerd_binary": "/bin/false"},
            "must be a file name ending in .toml",
        ),
    ],
)
def test_bad_input_is_refused_before_anything_runs(
    tmp_path: Path, capsys, args: dict, message: str
) -> None:
    result = run_module(dict(paths(tmp_path), **args), capsys)
    assert result["failed"]
    assert message in result["msg"]
    assert result["changed"] is False and result["restart_required"] is False
    assert list(tmp_path.iterdir()) == []


def test_drop_in_dir_that_is_a_file_is_refused(tmp_path: Path, capsys) -> None:
    args = paths(tmp_path)
    Path(args["drop_in_dir"]).write_text("not a directory\n")
    # /bin/false stands for containerd only to pass the "is it installed" check: the refusal
    # comes before any command runs, so it is never executed.
    result = run_module(dict(args, containerd_binary="/bin/false"), capsys)
    assert result["failed"]
    assert "exists but is not a directory" in result["msg"]
    assert "nothing was changed" in result["msg"]
    assert Path(args["drop_in_dir"]).read_text() == "not a directory\n"
    assert not Path(args["config_path"]).exists()


class _Captured(Exception):
    pass


def argument_spec_of(module, monkeypatch) -> dict:
    seen = {}

    def fake(**kwargs):
        seen.update(kwargs)
        raise _Captured

    monkeypatch.setattr(module, "AnsibleModule", fake)
    with pytest.raises(_Captured):
        module.main()
    return seen["argument_spec"]


def test_documentation_matches_the_argument_spec(monkeypatch) -> None:
    import yaml

    doc = yaml.safe_load(containerd_runtime.DOCUMENTATION)
    yaml.safe_load(containerd_runtime.EXAMPLES)
    returned = yaml.safe_load(containerd_runtime.RETURN)
    spec = argument_spec_of(containerd_runtime, monkeypatch)
    assert set(doc["options"]) == set(spec)
    for name, option in spec.items():
        assert doc["options"][name]["type"] == option["type"], name
        assert doc["options"][name].get("default") == option.get("default"), name
    assert {"restart_required", "validation", "schema", "systemd_cgroup"} <= set(returned)
    assert doc["attributes"]["check_mode"]["support"] == "full"
