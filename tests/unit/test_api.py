"""The Python API and runner: real ansible-runner runs of small playbooks on localhost."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import kubegpu
from kubegpu import runner
from kubegpu.content import KNOWN_TAGS, find_content
from kubegpu.errors import InputError
from kubegpu.events import Event

PLAYBOOKS = Path(__file__).resolve().parent.parent / "data" / "playbooks"


def local_inventory(**hostvars: Any) -> dict[str, Any]:
    return {
        "all": {
            "hosts": {
                "local1": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                    **hostvars,
                }
            }
        }
    }


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_success_reports_stats_events_and_set_stats(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    events: list[Event] = []
    result = runner.run_playbook(
        PLAYBOOKS / "ok.yml",
        local_inventory(marker_path=str(marker)),
        on_event=events.append,
    )
    assert result.ok, result
    assert result.status == "successful" and result.rc == 0
    assert result.hosts["local1"].changed == 1
    assert result.hosts["local1"].failures == 0
    assert marker.read_text() == "kubegpu test\n"
    assert result.readiness == {
        "local1": {
            "verdict": "ready",
            "checks": [
                {"name": "marker", "layer": "test", "status": "pass", "observed": str(marker)}
            ],
        }
    }
    kinds = [e.kind for e in events]
    assert kinds[0] == "playbook_start"
    assert "play_start" in kinds and kinds[-1] == "stats"
    changed = [e for e in events if e.kind == "ok" and e.changed]
    assert [(e.host, e.task) for e in changed] == [("local1", "Write the marker file")]
    # The private data dir was removed.
    assert result.artifacts_dir is None


def test_check_mode_changes_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    result = runner.run_playbook(
        PLAYBOOKS / "ok.yml", local_inventory(marker_path=str(marker)), check=True, diff=True
    )
    assert result.ok
    assert result.hosts["local1"].changed == 1  # it would change
    assert not marker.exists()  # but did not


def test_failed_task_surfaces_host_task_and_message() -> None:
    result = runner.run_playbook(PLAYBOOKS / "fail.yml", local_inventory())
    assert not result.ok
    assert result.status == "failed" and result.rc == 2
    assert result.failed_hosts == ["local1"]
    assert len(result.failed) == 1  # the ignored failure does not count
    failure = result.failed[0]
    assert failure.task == "Stop here with a clear message"
    assert failure.message == "the GPU layer is broken on purpose"
    assert result.hosts["local1"].ignored == 1
    assert result.unreachable == []


def test_unreachable_host_is_reported() -> None:
    inventory = {
        "all": {
            "hosts": {
                "gone1": {
                    "ansible_host": "127.0.0.1",
                    "ansible_port": closed_port(),
                    "ansible_user": "nobody",
                    "ansible_ssh_common_args": "-o ConnectTimeout=3 -o BatchMode=yes",
                    "ansible_host_key_checking": False,
                }
            }
        }
    }
    result = runner.run_playbook(PLAYBOOKS / "ok.yml", inventory, extra_vars={"marker_path": "/x"})
    assert not result.ok
    assert result.unreachable_hosts == ["gone1"]
    assert result.unreachable[0].task == "Write the marker file"
    assert "Connection refused" in result.unreachable[0].message
    assert result.hosts["gone1"].unreachable == 1


def test_cancel_stops_the_run(tmp_path: Path) -> None:
    stop = threading.Event()
    stop.set()
    result = runner.run_playbook(
        PLAYBOOKS / "ok.yml", local_inventory(marker_path=str(tmp_path / "m")), cancel=stop
    )
    assert result.status == "canceled"
    assert not result.ok


def test_keep_artifacts_keeps_a_private_dir_without_env_files(tmp_path: Path) -> None:
    result = runner.run_playbook(
        PLAYBOOKS / "ok.yml",
        local_inventory(marker_path=str(tmp_path / "m")),
        keep_artifacts=True,
    )
    assert result.artifacts_dir is not None
    try:
        assert result.artifacts_dir.stat().st_mode & 0o777 == 0o700
        assert not (result.artifacts_dir / "env" / "envvars").exists()
    finally:
        import shutil

        shutil.rmtree(result.artifacts_dir)


@pytest.mark.parametrize(
    ("kwargs", "variable", "fragment"),
    [
        ({"tags": ["drivers"]}, "tags", "unknown tag(s) drivers"),
        ({"skip_tags": ["nope"]}, "skip_tags", "unknown tag(s) nope"),
        ({"extra_vars": {"registry_password": "x"}}, "extra_vars.registry_password", "secret"),
        ({"extra_vars": {"not a name": 1}}, "extra_vars", "not a valid variable name"),
    ],
)
def test_bad_input_is_refused_before_running(
    kwargs: dict[str, Any], variable: str, fragment: str
) -> None:
    with pytest.raises(kubegpu.InputError) as info:
        kubegpu.bootstrap(local_inventory(), **kwargs)
    assert info.value.variable == variable
    assert fragment in str(info.value)


def test_missing_inventory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(kubegpu.InputError, match="does not exist"):
        kubegpu.check(tmp_path / "nope.yml")


def test_reset_needs_confirmation() -> None:
    with pytest.raises(kubegpu.InputError, match="confirm"):
        kubegpu.reset(local_inventory())


@pytest.mark.parametrize(
    ("entry_point", "kwargs", "fragment"),
    [
        (
            kubegpu.bootstrap,
            {"limt": "node1"},
            "bootstrap() got unexpected keyword argument(s) limt",
        ),
        # The readiness checks change nothing: they take no check or diff.
        (kubegpu.check, {"check": True}, "check() got unexpected keyword argument(s) check"),
        (kubegpu.reset, {"confirm": True, "force": True}, "reset() got unexpected keyword"),
    ],
)
def test_an_unknown_option_is_refused_with_the_options_there_are(
    entry_point: Any, kwargs: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(TypeError) as info:
        entry_point(local_inventory(), **kwargs)
    assert fragment in str(info.value)
    assert "limit" in str(info.value) and "extra_vars" in str(info.value)


def test_reset_keeps_the_extra_vars_and_adds_its_confirmation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, Any] = {}

    def fake_run(playbook: Any, inventory: Any, **options: Any) -> str:
        seen.update(options, playbook=playbook)
        return "result"

    monkeypatch.setattr(kubegpu.api, "run_playbook", fake_run)
    given = {"gpu_tenants": []}
    assert kubegpu.reset(local_inventory(), confirm=True, extra_vars=given, limit="n1") == "result"
    assert seen["extra_vars"] == {"gpu_tenants": [], "kubegpu_reset_confirm": True}
    assert seen["limit"] == "n1" and Path(seen["playbook"]).name == "reset.yml"
    assert given == {"gpu_tenants": []}


def test_secret_paths_are_allowed() -> None:
    assert runner._check_extra_vars({"registry_token_file": "/root/t"}) == {
        "registry_token_file": "/root/t"
    }


def test_known_tags_match_the_playbooks(repo_root: Path) -> None:
    import subprocess
    import sys

    content = find_content()
    env = {"ANSIBLE_CONFIG": str(content.ansible_cfg), "PATH": str(Path(sys.executable).parent)}
    tags: set[str] = set()
    for playbook in ["site.yml", "playbooks/upgrade_driver.yml", "playbooks/reset.yml"]:
        out = subprocess.run(
            [
                str(Path(sys.executable).parent / "ansible-playbook"),
                "--list-tags",
                "-i",
                "inventories/sample",
                playbook,
            ],
            cwd=repo_root,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for line in out.splitlines():
            if "TASK TAGS:" in line:
                inner = line.split("TASK TAGS:", 1)[1].strip().strip("[]")
                tags.update(t.strip() for t in inner.split(",") if t.strip())
    assert tags
    assert tags <= KNOWN_TAGS, tags - KNOWN_TAGS


@pytest.mark.parametrize(
    "name",
    [
        "ansible_become_pass",
        "ansible_ssh_pass",
        "ansible_password",
        "api_key",
        "aws_secret_access_key",
        "token_value",
        "registryToken",
        "client_secret",
    ],
)
def test_secret_looking_extra_vars_are_refused_nested_too(name: str) -> None:
    for given, where in (
        ({name: "x"}, f"extra_vars.{name}"),
        ({"registry": {"mirrors": [{name: "x"}]}}, f"extra_vars.registry.mirrors[0].{name}"),
    ):
        with pytest.raises(InputError) as raised:
            runner._check_extra_vars(given)
        assert raised.value.variable == where
        assert "looks like a secret" in str(raised.value)


def test_a_mapping_inventory_with_a_secret_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    inventory = {"all": {"hosts": {"n1": {"ansible_become_pass": "hunter2"}}}}
    with pytest.raises(InputError) as raised:
        runner._one_inventory(inventory, tmp_path)
    assert raised.value.variable == "inventory.all.hosts.n1.ansible_become_pass"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "name",
    [
        "gpu_cluster_pass_device_specs",
        "gpu_cluster_image_pull_secret",
        "ansible_ssh_private_key_file",
        "nvidia_container_toolkit_repo_key_url",
        "kubegpu_kubeconfig",
        "authorization_mode",
    ],
)
def test_names_that_only_sound_like_secrets_pass(name: str) -> None:
    assert runner._check_extra_vars({name: "x"}) == {name: "x"}


def _two_nodes(tmp_path: Path) -> str:
    path = tmp_path / "hosts.yml"
    path.write_text(
        "gpu_nodes:\n  hosts:\n    gpu1: {ansible_host: 192.0.2.1}\n    gpu2: {ansible_host: 192.0.2.2}\n"
    )
    return str(path)


@pytest.mark.parametrize(
    ("limit", "hosts"),
    [
        ("gpu1", ["gpu1"]),
        ("all:!gpu2", ["gpu1"]),
        ("gpu*", ["gpu1", "gpu2"]),
        ("gpu2,localhost", ["gpu2"]),
    ],
)
def test_a_limit_keeps_the_controller_plays(tmp_path: Path, limit: str, hosts: list[str]) -> None:
    """The limit becomes a file of the hosts it selects, plus localhost; ansible-playbook then
    lists localhost for the controller plays (input checks, cluster layer) and only the
    selected nodes for the node plays."""
    inventory = _two_nodes(tmp_path)
    kept = runner.keep_controller(limit, [inventory], tmp_path)
    assert kept == f"@{tmp_path / 'limit'}"
    assert (tmp_path / "limit").read_text().split() == [*hosts, "localhost"]
    content = find_content()
    listed = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "--list-hosts",
            "-i",
            inventory,
            "--limit",
            kept,
            str(content.root / "site.yml"),
        ],
        env={**os.environ, **runner._environment(content)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    plays = re.findall(r"pattern: \['(\w+)'\]\n\s+hosts \(\d+\):\n((?:\s{6}\S+\n)*)", listed)
    assert len(plays) >= 7, listed
    picked = {"localhost": ["localhost"], "gpu_nodes": hosts}
    for pattern, block in plays:
        # The inventory has no k8s_cluster group (the kubeadm bootstrap's): no host there.
        assert sorted(block.split()) == picked.get(pattern, []), listed
    assert {pattern for pattern, _ in plays} >= set(picked), listed


@pytest.mark.parametrize("limit", ["gpu9", "nothere*", "localhost"])
def test_a_limit_that_selects_no_node_is_bad_input(tmp_path: Path, limit: str) -> None:
    with pytest.raises(InputError) as info:
        runner.keep_controller(limit, [_two_nodes(tmp_path)], tmp_path)
    assert info.value.variable == "limit" and "selects no host" in str(info.value)
    assert not (tmp_path / "limit").exists()
