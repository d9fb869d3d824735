"""kubegpu.gpu.kubelet_config run through `ansible localhost -m` on files under tmp_path.

Normal, check and diff mode, idempotence, the k3s and drop-in layouts, and the error paths.
Each case is one ansible run (about two seconds), so the runs are few and each asserts much.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ANSIBLE = str(Path(sys.executable).parent / "ansible")

# A kubelet configuration of the shape kubeadm writes at join time, the extra-args file an
# operator keeps beside it, and a k3s agent's configuration (tests/data/kubelet).
KUBELET_DATA = Path(__file__).resolve().parents[1] / "data" / "kubelet"
KUBEADM_CONFIG = (KUBELET_DATA / "kubeadm-config.yaml").read_text()
DEFAULT_KUBELET = (KUBELET_DATA / "default-kubelet").read_text()
K3S_CONFIG = (KUBELET_DATA / "k3s-config.yaml").read_text()

ARGS = {
    "flavor": "kubeadm",
    "kubelet_version": "1.35",
    "feature_gates": {"KubeletPodResourcesGet": True},
    "settings": {"maxPods": 200, "evictionHard": {"memory.available": "5%"}},
    "node_labels": {"nvidia.com/gpu.present": "true"},
    "node_taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
}


def run_module(repo_root: Path, args: dict, *flags: str) -> dict:
    # The record of what the module changed goes beside the files it changes, never to /etc.
    paths = [args[k] for k in ("config_path", "extra_args_path") if args.get(k)]
    if paths and "record_path" not in args:
        args = dict(args, record_path=str(Path(paths[0]).parent / "kubegpu_kubelet.fact"))
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(repo_root / "ansible.cfg"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_DEPRECATION_WARNINGS="0",
    )
    proc = subprocess.run(
        [
            ANSIBLE,
            "localhost",
            "-c",
            "local",
            "-m",
            "kubegpu.gpu.kubelet_config",
            "-a",
            json.dumps(args),
            *flags,
        ],
        cwd=repo_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(
            f"ansible printed no JSON (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return report["plays"][0]["tasks"][0]["hosts"]["localhost"]


@pytest.fixture
def kubeadm_files(tmp_path: Path) -> dict:
    config = tmp_path / "var-lib-kubelet" / "config.yaml"
    config.parent.mkdir()
    config.write_text(KUBEADM_CONFIG)
    extra = tmp_path / "default-kubelet"
    extra.write_text(DEFAULT_KUBELET)
    return {"config_path": str(config), "extra_args_path": str(extra)}


def test_kubeadm_merge_then_idempotent(repo_root: Path, kubeadm_files: dict) -> None:
    result = run_module(repo_root, dict(ARGS, **kubeadm_files))
    assert result.get("failed") is not True, result.get("msg")
    assert result["changed"] is True
    assert result["restart_needed"] is True
    assert result["files"] == [kubeadm_files["config_path"], kubeadm_files["extra_args_path"]]
    assert len(result["backup_files"]) == 2
    assert [Path(b).read_text() for b in result["backup_files"]] == [
        KUBEADM_CONFIG,
        DEFAULT_KUBELET,
    ]
    assert result["version_source"] == "given"
    assert result["kubelet_version"] == "1.35"

    config = yaml.safe_load(Path(kubeadm_files["config_path"]).read_text())
    expected = yaml.safe_load(KUBEADM_CONFIG)
    expected["featureGates"]["KubeletPodResourcesGet"] = True
    expected["evictionHard"]["memory.available"] = "5%"
    expected["maxPods"] = 200
    assert config == expected

    extra = Path(kubeadm_files["extra_args_path"]).read_text()
    assert extra.splitlines()[:2] == DEFAULT_KUBELET.splitlines()[:2]
    assert extra.splitlines()[2] == (
        'KUBELET_EXTRA_ARGS="--node-ip=10.20.0.15 --node-labels=team=ml,nvidia.com/gpu.present=true '
        '--max-pods 180 --register-with-taints=nvidia.com/gpu=present:NoSchedule"'
    )

    again = run_module(repo_root, dict(ARGS, **kubeadm_files))
    assert again["changed"] is False
    assert again["restart_needed"] is False
    assert again["files"] == []


def test_check_and_diff_mode_report_and_touch_nothing(repo_root: Path, kubeadm_files: dict) -> None:
    before = {p: Path(p).stat().st_mtime_ns for p in kubeadm_files.values()}
    result = run_module(repo_root, dict(ARGS, **kubeadm_files), "--check", "--diff")
    assert result["changed"] is True
    assert result["files"] == [kubeadm_files["config_path"], kubeadm_files["extra_args_path"]]
    assert result["backup_files"] == []
    assert [d["before_header"] for d in result["diff"]] == list(result["files"])
    assert result["diff"][1]["before"] == DEFAULT_KUBELET
    assert "--register-with-taints=nvidia.com/gpu=present:NoSchedule" in result["diff"][1]["after"]
    assert "KubeletPodResourcesGet: true" in result["diff"][0]["after"]
    assert {p: Path(p).stat().st_mtime_ns for p in kubeadm_files.values()} == before
    assert Path(kubeadm_files["config_path"]).read_text() == KUBEADM_CONFIG
    assert sorted(os.listdir(Path(kubeadm_files["config_path"]).parent)) == ["config.yaml"]


def test_bad_inputs_fail_with_every_problem_and_change_nothing(
    repo_root: Path, kubeadm_files: dict
) -> None:
    args = {
        "flavor": "kubeadm",
        "feature_gates": {"DevicePlugins": True},
        "settings": {"max_pods": 200},
        "node_labels": {"alpha.kubernetes.io/nvidia-gpu-name": "Tesla K80"},
        "node_taints": [{"key": "nvidia.com/gpu", "effect": "NoScheduel"}],
        "dropin_name": "kubegpu.yaml",
        "binary": "/nonexistent/kubelet",
        **kubeadm_files,
    }
    result = run_module(repo_root, args)
    assert result["failed"] is True
    assert result["changed"] is False
    problems = result["problems"]
    assert len(problems) == 6
    assert problems[0] == (
        "settings: 'max_pods' is not a KubeletConfiguration field name; fields are camelCase, for "
        "example maxPods"
    )
    assert problems[1].startswith(
        "node_labels: the value of 'alpha.kubernetes.io/nvidia-gpu-name' is 'Tesla K80', which is "
        "not a valid label value"
    )
    assert problems[2].startswith(
        "node_labels: 'alpha.kubernetes.io/nvidia-gpu-name' is in the kubernetes.io namespace, "
        "where a kubelet may not label its own node (NodeRestriction)"
    )
    assert problems[3] == (
        "node_taints[0]: effect 'NoScheduel' is not one of NoSchedule, PreferNoSchedule, NoExecute"
    )
    assert problems[4] == (
        "dropin_name: 'kubegpu.yaml' must be a plain file name ending in .conf (letters, digits, "
        "'.', '_' and '-'; the kubelet reads only *.conf files in its drop-in directory), for "
        "example 50-kubegpu.conf"
    )
    assert problems[5] == (
        "kubelet_version: not given, and no kubelet binary on this host could tell its version; "
        'set kubelet_version (for example "1.35") to the version of the kubelet that will read '
        "these settings"
    )
    assert result["msg"].startswith(
        "kubelet_config: 6 problem(s) with the inputs; nothing was changed:\n- "
    )
    assert Path(kubeadm_files["config_path"]).read_text() == KUBEADM_CONFIG
    assert Path(kubeadm_files["extra_args_path"]).read_text() == DEFAULT_KUBELET


def test_gate_problems_and_unreadable_config(repo_root: Path, kubeadm_files: dict) -> None:
    """A gate the version lacks is refused; with good inputs, broken YAML stops the run."""
    bad_gate = run_module(
        repo_root,
        {
            "flavor": "kubeadm",
            "kubelet_version": "1.33",
            "feature_gates": {"CPUManager": True},
            **kubeadm_files,
        },
    )
    assert bad_gate["problems"] == [
        "feature_gates: 'CPUManager' was removed from Kubernetes in 1.33; the kubelet of 1.33 does "
        "not have it and would refuse to start. Remove it."
    ]
    Path(kubeadm_files["config_path"]).write_text("kind: KubeletConfiguration\nfeatureGates: [\n")
    broken = run_module(repo_root, dict(ARGS, **kubeadm_files))
    assert broken["failed"] is True
    assert broken["msg"].startswith(
        f"Nothing was changed: {kubeadm_files['config_path']} is not valid YAML: "
    )
    assert Path(kubeadm_files["extra_args_path"]).read_text() == DEFAULT_KUBELET


def test_k3s_lists_merged_and_other_keys_kept(repo_root: Path, tmp_path: Path) -> None:
    config = tmp_path / "k3s-config.yaml"
    config.write_text(K3S_CONFIG)
    args = {
        "flavor": "k3s",
        "kubelet_version": "v1.36.3+k3s1",
        "feature_gates": {"KubeletPodResourcesGet": True},
        "node_labels": {"nvidia.com/gpu.present": "true"},
        "node_taints": ["nvidia.com/gpu=present:NoSchedule"],
        "config_path": str(config),
        "backup": False,
    }
    result = run_module(repo_root, args)
    assert result["changed"] is True
    assert result["flavor"] == "k3s"
    assert result["kubelet_version"] == "1.36"
    assert result["backup_files"] == []
    assert yaml.safe_load(config.read_text()) == {
        "server": "https://10.20.0.2:6443",
        "token-file": "/etc/rancher/k3s/token",
        "node-label": ["team=ml", "nvidia.com/gpu.present=true"],
        "kubelet-arg": ["max-pods=180", "feature-gates=KubeletPodResourcesGet=true"],
        "node-taint": ["nvidia.com/gpu=present:NoSchedule"],
    }
    assert run_module(repo_root, args)["changed"] is False


def test_k3s_diff_never_shows_the_token(repo_root: Path, tmp_path: Path) -> None:
    """k3s's config.yaml holds the join token (kubegpu writes it 0600): --diff shows the file
    with every value but the token's."""
    config = tmp_path / "k3s-config.yaml"
    config.write_text(
        K3S_CONFIG + "token: K10secret-join-token::server:abc\n"
        "datastore-endpoint: postgres://k3s:db-password-1@db.internal:5432/k3s\n"
    )
    args = {
        "flavor": "k3s",
        "kubelet_version": "v1.36.3+k3s1",
        "feature_gates": {"KubeletPodResourcesGet": True},
        "config_path": str(config),
        "backup": False,
    }
    result = run_module(repo_root, args, "--check", "--diff")
    assert result["changed"] is True
    text = json.dumps(result)
    assert "K10secret-join-token" not in text and "db-password-1" not in text
    (diff,) = result["diff"]
    for side in ("before", "after"):
        assert "token: <redacted>" in diff[side]
        assert "postgres://k3s:<redacted>@db.internal:5432/k3s" in diff[side]
        assert "token-file: /etc/rancher/k3s/token" in diff[side]
    assert "feature-gates=KubeletPodResourcesGet=true" in diff["after"]
    assert "K10secret-join-token" in config.read_text()  # check mode: the file is untouched


def test_a_restart_is_owed_until_the_handler_clears_its_marker(
    repo_root: Path, kubeadm_files: dict, tmp_path: Path
) -> None:
    """A run interrupted between the files' write and the kubelet's restart (the handler never
    ran): the marker written before the write stays, and the next run, with nothing left to
    write, still says changed and restart_needed, so the role's handler restarts the kubelet."""
    marker = tmp_path / "restart-pending" / "kubelet.json"
    kubelet = tmp_path / "kubelet"  # prints what a kubelet 1.35 prints for --version
    kubelet.write_text("#!/bin/sh\necho 'Kubernetes v1.35.2'\n")
    kubelet.chmod(0o755)
    args = dict(ARGS, binary=str(kubelet), restart_marker=str(marker), **kubeadm_files)
    first = run_module(repo_root, args)
    assert first["changed"] and first["restart_needed"] and first["kubelet_found"]
    assert json.loads(marker.read_text()) == {"files": first["files"]}
    owed = run_module(repo_root, args)
    assert owed["changed"] and owed["restart_needed"] and owed["restart_pending"]
    assert owed["files"] == []
    marker.unlink()  # what the handler does once the kubelet has restarted
    settled = run_module(repo_root, args)
    assert settled["changed"] is False and "restart_pending" not in settled
    assert not marker.exists()
    # No kubelet on the host: nothing to restart, so no marker.
    other = tmp_path / "other"
    other.mkdir()
    fresh = {k: str(other / Path(v).name) for k, v in kubeadm_files.items()}
    Path(fresh["config_path"]).write_text(KUBEADM_CONFIG)
    args = dict(ARGS, binary="/nonexistent/kubelet", restart_marker=str(marker), **fresh)
    nothing = run_module(repo_root, args)
    assert nothing["changed"] is True and nothing["kubelet_found"] is False, nothing
    assert not marker.exists()


def test_kubeadm_drop_in_directory(repo_root: Path, kubeadm_files: dict, tmp_path: Path) -> None:
    dropins = tmp_path / "kubelet.conf.d"
    args = dict(ARGS, kubelet_version="1.33", config_dir=str(dropins), **kubeadm_files)
    result = run_module(repo_root, args)
    dropin = dropins / "50-kubegpu.conf"
    assert result["files"] == [str(dropin), kubeadm_files["extra_args_path"]]
    assert Path(kubeadm_files["config_path"]).read_text() == KUBEADM_CONFIG
    assert yaml.safe_load(dropin.read_text()) == {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "maxPods": 200,
        "evictionHard": {"memory.available": "5%"},
        "featureGates": {"KubeletPodResourcesGet": True},
    }
    assert oct(dropin.stat().st_mode & 0o777) == "0o644"
    extra = Path(kubeadm_files["extra_args_path"]).read_text().splitlines()
    assert extra[2].endswith(f' --config-dir={dropins}"')
    # Beta from 1.30 on: the alpha switch of 1.28 and 1.29 is left out.
    assert not any("KUBELET_CONFIG_DROPIN_DIR_ALPHA" in line for line in extra)


def test_role_argument_specs_match_defaults(repo_root: Path) -> None:
    role = repo_root / "roles" / "kubelet_gpu"
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    for entry_point in ("main", "validate"):
        options = specs[entry_point]["options"]
        assert set(options) == set(defaults), entry_point
        for name, option in options.items():
            assert option["default"] == defaults[name], name
            assert option["description"], name


def test_documentation_matches_argument_spec() -> None:
    from ansible_collections.kubegpu.gpu.plugins.modules import kubelet_config

    options = yaml.safe_load(kubelet_config.DOCUMENTATION)["options"]
    assert set(options) == set(kubelet_config.ARGUMENT_SPEC)
    for name, spec in kubelet_config.ARGUMENT_SPEC.items():
        doc = options[name]
        assert doc["type"] == spec["type"], name
        assert doc.get("default") == spec.get("default"), name
        assert doc.get("choices") == spec.get("choices"), name
        assert doc.get("elements") == spec.get("elements"), name
    for section in ("EXAMPLES", "RETURN"):
        assert yaml.safe_load(getattr(kubelet_config, section))


def test_validate_only_says_whether_the_target_python_has_pyyaml(
    repo_root: Path, tmp_path: Path
) -> None:
    # The role installs PyYAML only when this says no. With the test's own Python (which has
    # PyYAML) it says yes; with the same Python without site-packages (python -S, through a
    # wrapper given as the interpreter) PyYAML cannot be found and it says no.
    args = {"flavor": "kubeadm", "kubelet_version": "1.35", "validate_only": True}
    with_yaml = run_module(repo_root, args, "-e", f"ansible_python_interpreter={sys.executable}")
    assert with_yaml.get("failed") is not True, with_yaml
    assert with_yaml["python_yaml"] is True
    wrapper = tmp_path / "python-no-site"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    wrapper.chmod(0o755)
    without = run_module(repo_root, args, "-e", f"ansible_python_interpreter={wrapper}")
    assert without.get("failed") is not True, without
    assert without["python_yaml"] is False


def test_a_merge_without_pyyaml_reports_or_fails_as_asked(
    repo_root: Path, tmp_path: Path, kubeadm_files: dict
) -> None:
    # The role's one call: with PyYAML it checks and merges; without, "report" checks the inputs,
    # changes nothing and says python_yaml false (the role then installs PyYAML), and "fail"
    # names the package to install.
    wrapper = tmp_path / "python-no-site"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    wrapper.chmod(0o755)
    no_yaml = ("-e", f"ansible_python_interpreter={wrapper}")
    before = {path: Path(path).read_text() for path in kubeadm_files.values()}
    args = dict(ARGS, **kubeadm_files, without_pyyaml="report")
    reported = run_module(repo_root, args, *no_yaml)
    assert reported.get("failed") is not True, reported
    assert (reported["python_yaml"], reported["changed"]) == (False, False)
    assert reported["problems"] == []
    failed = run_module(repo_root, dict(args, without_pyyaml="fail"), *no_yaml)
    assert failed["failed"] is True and failed["python_yaml"] is False
    assert "install python3-yaml" in failed["msg"]
    bad = run_module(repo_root, dict(args, feature_gates={"DevicePlugins": True}), *no_yaml)
    assert bad["failed"] is True and bad["problems"], bad
    assert {path: Path(path).read_text() for path in kubeadm_files.values()} == before
    merged = run_module(repo_root, args, "-e", f"ansible_python_interpreter={sys.executable}")
    assert (merged["python_yaml"], merged["changed"]) == (True, True), merged
