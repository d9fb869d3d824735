"""Every plugin's DOCUMENTATION is YAML that ansible-doc can read: a stray ': ' in a description
line makes it a mapping error, and ansible-doc then says the plugin has no documentation."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
# The core collection's plugins and the accelerator's.
PLUGINS = (REPO / "plugins", REPO / "collections/ansible_collections/kubegpu/accel/plugins")
WITH_DOCS = sorted(
    path
    for plugins in PLUGINS
    for path in plugins.glob("*/*.py")
    if path.parent.name not in ("module_utils", "plugin_utils") and path.name != "__init__.py"
)


def documentation(path: Path) -> str | None:
    """The DOCUMENTATION string of a plugin, or of a doc fragment's ModuleDocFragment class."""
    tree = ast.parse(path.read_text())
    body = list(tree.body)
    body += [item for node in tree.body if isinstance(node, ast.ClassDef) for item in node.body]
    for node in body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "DOCUMENTATION" for target in node.targets
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, str)
            return value
    return None


@pytest.mark.parametrize("path", WITH_DOCS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_the_documentation_parses(path: Path) -> None:
    text = documentation(path)
    if text is None:
        # Action plugins and filter files are documented by their module or in YAML files.
        assert path.parent.name in ("action", "filter"), f"{path} has no DOCUMENTATION"
        return
    doc = yaml.safe_load(text)
    assert isinstance(doc, dict), path
    if path.parent.name != "doc_fragments":
        assert doc.get("short_description"), path
    # A description line with ': ' in it turns into a mapping (or a YAML error, above).
    description = doc.get("description", [] if path.parent.name == "doc_fragments" else None)
    assert description is not None and all(isinstance(line, str) for line in description), path
    for name, option in (doc.get("options") or {}).items():
        lines = option.get("description")
        lines = [lines] if isinstance(lines, str) else lines
        assert lines and all(isinstance(line, str) for line in lines), (path, name)
