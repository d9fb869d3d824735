"""The container_runtime and nvidia_container_toolkit roles' files: interface and templates."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import jinja2
import pytest
import yaml

ROLES = ("container_runtime", "nvidia_container_toolkit")


def load_yaml(path: Path):
    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_and_defaults_agree(repo_root: Path, role: str) -> None:
    defaults = load_yaml(repo_root / "roles" / role / "defaults" / "main.yml")
    options = load_yaml(repo_root / "roles" / role / "meta" / "argument_specs.yml")[
        "argument_specs"
    ]["main"]["options"]
    assert set(defaults) == set(options)
    for name, spec in options.items():
        assert name.startswith(role + "_"), name
        assert spec["default"] == defaults[name], name
        assert spec.get("description"), name


@pytest.mark.parametrize("role", ROLES)
def test_every_public_default_is_commented(repo_root: Path, role: str) -> None:
    lines = (repo_root / "roles" / role / "defaults" / "main.yml").read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^[a-z_]+:", line):
            # a comment block precedes each variable (or the variable right above it, for groups)
            above = lines[i - 1]
            assert (
                above.startswith("#") or re.match(r"^[a-z_]+:", above) or above.startswith("  ")
            ), line


def render_crio(repo_root: Path, **values) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["to_json"] = json.dumps
    env.filters["bool"] = bool
    template = env.from_string(
        (repo_root / "roles/container_runtime/templates/crio-nvidia.conf.j2").read_text()
    )
    defaults = load_yaml(repo_root / "roles/container_runtime/defaults/main.yml")
    context = {k: v for k, v in defaults.items() if not str(v).startswith("{{")}
    context.update(values)
    return template.render(**context)


@pytest.mark.parametrize("default_runtime", [False, True])
def test_crio_drop_in_renders_valid_toml(repo_root: Path, default_runtime: bool) -> None:
    text = render_crio(repo_root, container_runtime_default_runtime=default_runtime)
    data = tomllib.loads(text)
    runtime = {"runtime_path": "/usr/bin/nvidia-container-runtime", "runtime_type": "oci"}
    expected = {"crio": {"runtime": {"runtimes": {"nvidia": runtime}}}}
    if default_runtime:
        expected["crio"]["runtime"]["default_runtime"] = "nvidia"
    assert data == expected
    assert text.startswith("# Managed by kubegpu")


def test_crio_drop_in_quotes_odd_paths(repo_root: Path) -> None:
    text = render_crio(
        repo_root,
        container_runtime_nvidia_runtime_name="nvidia-cdi",
        container_runtime_nvidia_binary='/opt/nvidia "toolkit"/nvidia-container-runtime',
    )
    runtime = tomllib.loads(text)["crio"]["runtime"]["runtimes"]["nvidia-cdi"]
    assert runtime["runtime_path"] == '/opt/nvidia "toolkit"/nvidia-container-runtime'


@pytest.mark.parametrize(
    ("version", "ok"),
    [
        ("1.18.0-1", True),
        ("1.17.8-1", True),
        ("1.18.0-*", True),
        ("1.18.*", True),
        ("1.18.0-1.el9", True),
        ("1.18", True),
        ("v1.18.0", False),
        ("latest", False),
        ("1.18.0 -1", False),
        ("", False),
    ],
)
def test_toolkit_version_format(repo_root: Path, version: str, ok: bool) -> None:
    regex = load_yaml(repo_root / "roles/nvidia_container_toolkit/vars/main.yml")[
        "__nvidia_container_toolkit_version_regex"
    ]
    assert (re.match(regex, version) is not None) is ok


@pytest.mark.parametrize(
    ("family", "manager", "kind"),
    [("Debian", "apt", "/deb/$(ARCH)"), ("RedHat", "dnf", "/rpm/$basearch")],
)
def test_vendor_repository_defaults_point_to_nvidia(
    repo_root: Path, family: str, manager: str, kind: str
) -> None:
    values = load_yaml(repo_root / "roles/nvidia_container_toolkit/vars/main.yml")
    facts = {"ansible_facts": {"os_family": family}}

    def render(name: str) -> str:
        return jinja2.Environment().from_string(values[name]).render(facts).strip()

    assert render("__nvidia_container_toolkit_pkg_mgr") == manager
    url = render("__nvidia_container_toolkit_vendor_repo_url")
    assert url == "https://nvidia.github.io/libnvidia-container/stable" + kind
    assert render("__nvidia_container_toolkit_vendor_key_url").startswith("https://")
