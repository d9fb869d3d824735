"""`kubegpu artifacts list|check`: what an inventory installs, and whether its mirrors hold it.

The artifact manifest (plugins/module_utils/data/artifacts.yaml) pins every image and package;
an inventory picks among them (components switched on, its own versions, mirror registry and
repositories, architectures). `list` prints what that inventory pulls, as plain lists mirror
tools take (image references for `skopeo sync`/`crane copy`, `name=version` for apt/dnf) or as
JSON. `check` asks each mirror, before anything changes, and names every artifact that is not
there: a registry by a manifest HEAD by digest (the distribution API, its anonymous token flow
included), an apt repository by its Packages index.

Nothing here touches a host: the variables come from the inventory files and the roles'
defaults on the controller (and, for each node's OS, the fact cache when it has the node).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kubegpu.content import find_content
from kubegpu.errors import InputError
from kubegpu.workloads import content_module, plain

EXIT_OK = 0
EXIT_MISSING = 2
NODE_GROUP = "gpu_nodes"
Opener = Callable[..., Any]


@dataclass
class ArtifactList:
    images: list[dict[str, Any]]
    packages: list[dict[str, Any]]
    architectures: list[str]
    plain_http: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "images": self.images,
            "packages": self.packages,
            "architectures": self.architectures,
        }


@dataclass(frozen=True)
class Missing:
    kind: str  # image or package
    name: str
    reason: str


def inventory_hosts(path: Path) -> dict[str, dict[str, Any]]:
    """Each GPU node's variables (the inventory's, over the roles' defaults), templated, and
    the cluster's (localhost's view, as the cluster plays on localhost see them)."""
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    from ansible.vars.manager import VariableManager

    if not path.exists():
        raise InputError("--inventory", f"{path} does not exist", "an inventory file or folder")
    defaults = content_module("artifacts").picking_defaults(find_content().roles_path)
    loader = DataLoader()
    try:
        inventory = InventoryManager(loader=loader, sources=[str(path)])
        manager = VariableManager(loader=loader, inventory=inventory)
        names = [h.name for h in inventory.get_hosts(NODE_GROUP)]
        out = {}
        for name in ["localhost", *names]:
            host = inventory.get_host(name)
            found = manager.get_vars(host=host, include_hostvars=False)
            variables = dict(defaults)
            variables.update({k: v for k, v in found.items() if k in defaults})
            variables["ansible_facts"] = found.get("ansible_facts") or {}
            templar = Templar(loader=loader, variables=variables)
            out[name] = {k: plain(templar.template(variables[k])) for k in defaults}
            out[name]["os_family"] = variables["ansible_facts"].get("os_family") or "Debian"
            out[name]["distribution"] = variables["ansible_facts"].get("distribution") or "Debian"
        return out
    except AnsibleError as exc:
        raise InputError("--inventory", f"could not read {path}: {exc}", "an inventory") from exc


def build_list(hosts: dict[str, dict[str, Any]]) -> ArtifactList:
    artifacts = content_module("artifacts")
    try:
        found = artifacts.select(artifacts.load(), hosts)
    except artifacts.ArtifactError as exc:
        raise InputError(
            getattr(exc, "variable", "--inventory"), str(exc), getattr(exc, "allowed", "")
        ) from exc
    return ArtifactList(**found)


def check_list(
    listing: ArtifactList,
    hosts: dict[str, dict[str, Any]],
    opener: Opener = urllib.request.urlopen,
) -> list[Missing]:
    """Every artifact of the list its mirror lacks, with why."""
    found = content_module("artifacts").check(asdict(listing), hosts, opener)
    return [Missing(**item) for item in found]


def format_list(listing: ArtifactList, what: str) -> str:
    lines = []
    if what in ("all", "images"):
        if what == "all":
            lines.append(f"# images ({len(listing.images)}): references as the nodes pull them")
        lines += [image["reference"] for image in listing.images]
    if what in ("all", "packages"):
        if what == "all":
            lines.append(
                f"# packages ({len(listing.packages)}), for {', '.join(listing.architectures)}: "
                "name=version, or name where any version of the source serves"
            )
        lines += [
            f"{p['name']}={p['version']}" if p["version"] else p["name"] for p in listing.packages
        ]
    return "\n".join(lines) + "\n"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "artifacts",
        help="list what an inventory installs (images, packages) or check its mirrors hold it",
        description=(
            "list: the images and packages the inventory's settings pull, from kubegpu's artifact "
            "manifest. check: ask the inventory's registry and repositories for each; exit 2 "
            "naming every missing artifact, 4 on bad input. Nothing on any host changes."
        ),
    )
    sub = p.add_subparsers(dest="artifacts_command", metavar="ACTION")
    sub.required = True
    for name in ("list", "check"):
        q = sub.add_parser(name)
        q.add_argument("-i", "--inventory", required=True, help="the inventory")
        q.add_argument("--json", action="store_true", help="print JSON")
        if name == "list":
            q.add_argument(
                "--only", choices=("images", "packages"), help="print one list, nothing else"
            )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    hosts = inventory_hosts(Path(args.inventory))
    listing = build_list(hosts)
    if args.artifacts_command == "list":
        if args.json:
            print(json.dumps(listing.as_dict(), indent=2))
        else:
            sys.stdout.write(format_list(listing, args.only or "all"))
        return EXIT_OK
    missing = check_list(listing, hosts)
    if args.json:
        print(json.dumps({"missing": [asdict(m) for m in missing], **listing.as_dict()}, indent=2))
    else:
        for item in missing:
            print(f"missing {item.kind} {item.name}: {item.reason}")
        summary = content_module("artifacts").summary(asdict(listing), [asdict(m) for m in missing])
        print(summary)
    return EXIT_MISSING if missing else EXIT_OK
