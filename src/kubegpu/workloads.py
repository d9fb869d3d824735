"""Training workloads, example manifests and GPU dashboards, rendered from the gpu_tenancy variables.

The rendering itself is the pure modules of plugins/module_utils/ (tenancy_settings.py,
tenancy.py, training.py, gpu_monitoring.py), which the gpu_tenancy role uses too; this module
loads them from kubegpu's content (the checkout or the installed copy),
fills in the role's defaults and renders files. `python -m kubegpu.workloads` re-renders
examples/ and dashboards/ from roles/gpu_tenancy/defaults/main.yml and examples/values.yml;
`--check` only reports files that are out of date.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from kubegpu.content import find_content
from kubegpu.errors import InputError

PREFIX = "gpu_tenancy_"
ROLE = "gpu_tenancy"
MODULE_UTILS = "ansible_collections.kubegpu.gpu.plugins.module_utils."
VALUES_FILE = Path("examples") / "values.yml"
HEADER = (
    "# Rendered by `python -m kubegpu.workloads` from roles/gpu_tenancy/defaults/main.yml and\n"
    "# examples/values.yml (plugins/module_utils/). Do not edit: change those and render\n"
    "# again.\n"
)

Manifest = dict[str, Any]


def content_module(name: str) -> ModuleType:
    """plugins/module_utils/<name>.py of kubegpu's content, imported through its collection."""
    collections = str(find_content().collections_path)
    if collections not in sys.path:
        sys.path.append(collections)
    return importlib.import_module(MODULE_UTILS + name)


def role_defaults() -> dict[str, Any]:
    """The gpu_tenancy role's defaults/main.yml, as variables (with the prefix)."""
    path = find_content().roles_path / ROLE / "defaults" / "main.yml"
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise InputError(str(path), "is not a mapping of variables")
    return data


def plain(value: Any) -> Any:
    """Ansible's tagged strings, lists and dicts as plain JSON data."""
    return json.loads(json.dumps(value))


def settings(variables: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The role's defaults overlaid with the gpu_tenancy_* entries of `variables`, checked.

    Raises InputError listing every problem (each names the variable, tenant and field).
    """
    merged = {k[len(PREFIX) :]: v for k, v in role_defaults().items() if k.startswith(PREFIX)}
    for key, value in (variables or {}).items():
        if key.startswith(PREFIX):
            merged[key[len(PREFIX) :]] = plain(value)
    checked, errors = content_module("tenancy_settings").validate_settings(merged)
    if errors:
        raise InputError(
            "gpu_tenancy", f"{len(errors)} problem(s):\n  " + "\n  ".join(str(e) for e in errors)
        )
    return dict(checked)


class _Dumper(yaml.SafeDumper):
    """Block YAML; multi-line strings (scripts, dashboard JSON) as literal blocks."""


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    if "\n" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_Dumper.add_representer(str, _represent_str)


def dump_manifests(manifests: Sequence[Manifest]) -> str:
    """Manifests as one multi-document YAML text (keys in rendering order)."""
    docs = [
        yaml.dump(m, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)
        for m in manifests
    ]
    return HEADER + "---\n" + "---\n".join(docs)


def render_examples(variables: Mapping[str, Any] | None = None) -> dict[str, str]:
    """{relative path: text} of every example manifest and dashboard file.

    Tenants' objects go to examples/tenants/<name>.yaml, the workloads (in the first tenant's
    namespace, asking for its GPU products where it names them; the dra-* ones through
    ResourceClaims) to examples/workloads/, the
    Grafana dashboard, its ConfigMap and the PrometheusRule to dashboards/.
    """
    tenancy, training = content_module("tenancy"), content_module("training")
    dra = content_module("dra_workloads")
    monitoring = content_module("gpu_monitoring")
    s = settings(variables)
    tenants: list[dict[str, Any]] = list(s["tenants"])
    namespace = tenants[0]["name"] if tenants else "default"
    files: dict[str, str] = {}
    for tenant in tenants:
        files[f"examples/tenants/{tenant['name']}.yaml"] = dump_manifests(
            tenancy.render_tenant(s, tenant)
        )
    for name, manifests in training.render_workloads(s, namespace).items():
        files[f"examples/workloads/{name}.yaml"] = dump_manifests(manifests)
    # The same training on GPUs allocated through DRA (gpu_cluster_allocation: dra).
    for name, manifests in dra.render_dra_workloads(s, namespace).items():
        files[f"examples/workloads/{name}.yaml"] = dump_manifests(manifests)
    products = tenants[0]["gpu_products"] if tenants else []
    files["examples/workloads/pytorch-smoke.yaml"] = dump_manifests(
        training.render_smoke(s, namespace, "example", products=products)
    )
    files[f"dashboards/{monitoring.DASHBOARD_FILE}"] = monitoring.dashboard_json(s)
    files["dashboards/kubegpu-gpu-dashboard-configmap.yaml"] = dump_manifests(
        [monitoring.render_dashboard_configmap(s)]
    )
    files["dashboards/kubegpu-gpu-alerts.yaml"] = dump_manifests([monitoring.render_alert_rules(s)])
    return files


def load_values(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise InputError(str(path), "is not a mapping of gpu_tenancy_* variables")
    return data


def stale_files(root: Path, files: Mapping[str, str]) -> list[str]:
    """Paths under root whose text differs from `files` (missing ones included)."""
    stale = []
    for rel, text in sorted(files.items()):
        path = root / rel
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(rel)
    return stale


def write_files(root: Path, files: Mapping[str, str]) -> list[str]:
    """Write the files that changed; returns their relative paths."""
    changed = stale_files(root, files)
    for rel in changed:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(files[rel], encoding="utf-8")
        tmp.replace(path)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kubegpu.workloads",
        description="Render examples/ and dashboards/ from the gpu_tenancy variables.",
    )
    parser.add_argument(
        "--root", type=Path, default=None, help="repository root (default: kubegpu's checkout)"
    )
    parser.add_argument(
        "--values", type=Path, default=None, help="gpu_tenancy_* variables (examples/values.yml)"
    )
    parser.add_argument("--check", action="store_true", help="only list out-of-date files")
    args = parser.parse_args(argv)
    root = args.root or find_content().root
    values = args.values or root / VALUES_FILE
    try:
        files = render_examples(load_values(values))
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 4
    if args.check:
        stale = stale_files(root, files)
        for rel in stale:
            print(f"out of date: {rel}")
        return 1 if stale else 0
    for rel in write_files(root, files):
        print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
