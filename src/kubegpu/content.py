"""Where kubegpu's Ansible content lives: the checkout, or the copy shipped in the package."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Playbooks reachable through the API, by entry point.
PLAYBOOKS = {
    "bootstrap": "site.yml",
    "check": "playbooks/validate.yml",
    "upgrade_driver": "playbooks/upgrade_driver.yml",
    "reset": "playbooks/reset.yml",
}

# The layers of site.yml, by their tags, in the order it runs them.
LAYER_TAGS = (
    "preflight",
    "bootstrap",
    "driver",
    "mig",
    "cuda",
    "toolkit",
    "runtime",
    "kubelet",
    "cluster",
    "tenants",
    "validate",
)
# Every tag the playbooks use. A test keeps this in step with `ansible-playbook --list-tags`,
# so an unknown tag is refused before a run starts instead of silently matching nothing.
KNOWN_TAGS = frozenset({"always", *LAYER_TAGS, "upgrade", "reset"})


@dataclass(frozen=True)
class Content:
    """Paths of one copy of the Ansible content."""

    root: Path

    @property
    def ansible_cfg(self) -> Path:
        return self.root / "ansible.cfg"

    @property
    def collections_path(self) -> Path:
        return self.root / "collections"

    @property
    def collection(self) -> Path:
        return self.collections_path / "ansible_collections" / "kubegpu" / "gpu"

    @property
    def roles_path(self) -> Path:
        return self.collection / "roles"

    def playbook(self, entry_point: str) -> Path:
        return self.root / PLAYBOOKS[entry_point]


def _is_content_root(path: Path) -> bool:
    return (path / "site.yml").is_file() and (path / "ansible.cfg").is_file()


def find_content() -> Content:
    """Return the content next to this package: the checkout first, then the installed copy."""
    here = Path(__file__).resolve().parent
    checkout = here.parent.parent  # src/kubegpu -> repository root
    if _is_content_root(checkout):
        return Content(checkout)
    shipped = here / "_content"
    if _is_content_root(shipped):
        return Content(shipped)
    raise FileNotFoundError(
        f"kubegpu content not found: looked in {checkout} and {shipped}; reinstall the package"
    )
