"""The core collection kubegpu.gpu uses only what ansible-core offers plugin authors.

Every Python file under plugins/ is read as a syntax tree. Refused: an import from a private
module of ansible-core (a path part starting with `_`, such as `ansible._internal`), a private
name imported from ansible-core, an import of the executor or of another strategy, a class
built on one of those, reaching a private attribute of something imported from ansible-core,
and assigning to an attribute of it (patching). What needs any of that lives in the accelerator
collection kubegpu.accel, behind its version gate.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "plugins"
# Executor machinery: strategies, workers, the task executor and the module builder.
INTERNAL_MODULES = ("ansible.executor", "ansible.plugins.strategy")


def private_module(name: str) -> bool:
    return name.split(".")[0] == "ansible" and any(p.startswith("_") for p in name.split("."))


def findings(source: str) -> list[str]:
    """What the code does that the core may not, one line each."""
    tree = ast.parse(source)
    found: list[str] = []
    from_ansible: set[str] = set()  # local names bound to something of ansible-core
    from_internal: set[str] = set()  # ... to something of its executor or a private module
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "ansible":
                    from_ansible.add((alias.asname or alias.name).split(".")[0])
                    if private_module(alias.name):
                        found.append(f"line {node.lineno}: import {alias.name}")
                    if alias.name.startswith(INTERNAL_MODULES):
                        found.append(f"line {node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ansible":
            module = node.module or ""
            for alias in node.names:
                from_ansible.add(alias.asname or alias.name)
                full = f"{module}.{alias.name}"
                if (
                    private_module(module)
                    or (alias.name.startswith("_") and not alias.name.startswith("__"))
                    or full.startswith(INTERNAL_MODULES)
                ):
                    from_internal.add(alias.asname or alias.name)
                    found.append(f"line {node.lineno}: from {module} import {alias.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                text = ast.unparse(base)
                if text.split(".")[0] in from_internal:
                    found.append(f"line {node.lineno}: class {node.name}({text})")
        elif isinstance(node, ast.Attribute):
            root = node
            while isinstance(root, ast.Attribute):
                root = root.value  # type: ignore[assignment]
            if not (isinstance(root, ast.Name) and root.id in from_ansible):
                continue
            if node.attr.startswith("_") and not node.attr.startswith("__"):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
            if isinstance(node.ctx, ast.Store | ast.Del):
                found.append(f"line {node.lineno}: assigns {ast.unparse(node)}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("setattr", "delattr"):
            target = node.args[0] if node.args else None
            if isinstance(target, ast.Name) and target.id in from_ansible:
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return sorted(set(found))


def core_files() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


@pytest.mark.parametrize("path", core_files(), ids=lambda p: str(p.relative_to(CORE)))
def test_core_plugin_uses_public_interfaces_only(path: Path) -> None:
    assert findings(path.read_text(encoding="utf-8")) == []


def test_core_has_no_strategy_or_callback() -> None:
    assert not (CORE / "strategy").exists()
    assert not (CORE / "callback").exists()


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("from ansible._internal import _task", "from ansible._internal import _task"),
        ("import ansible._internal._templating", "import ansible._internal._templating"),
        (
            "from ansible.executor.module_common import _get_shebang",
            "from ansible.executor.module_common import _get_shebang",
        ),
        (
            "from ansible.executor.process.worker import WorkerProcess",
            "from ansible.executor.process.worker import WorkerProcess",
        ),
        (
            "from ansible.plugins.strategy.linear import StrategyModule as L\nclass S(L): pass",
            "class S(L)",
        ),
        ("from ansible import constants as C\nx = C._ACTION_DEBUG", "C._ACTION_DEBUG"),
        (
            "from ansible.executor import module_common\nmodule_common.recursive_finder = 1",
            "assigns module_common.recursive_finder",
        ),
        (
            "from ansible.plugins import loader\nsetattr(loader, 'x', 1)",
            "setattr(loader, 'x', 1)",
        ),
    ],
)
def test_the_check_catches(code: str, expected: str) -> None:
    assert any(expected in line for line in findings(code)), findings(code)


@pytest.mark.parametrize(
    "code",
    [
        "from ansible.plugins.action import ActionBase\nclass A(ActionBase):\n"
        "    def run(self):\n        return self._execute_module()",
        "from ansible.module_utils.basic import AnsibleModule",
        "from ansible.errors import AnsibleFilterError",
        "from ansible import constants as C\nx = C.config.get_config_value('X')",
    ],
)
def test_the_check_lets_public_interfaces_pass(code: str) -> None:
    assert findings(code) == []
