"""Runs kubegpu playbooks through ansible-runner, with the hygiene STYLE.md asks for.

- A fresh private data dir per run (mode 0700), removed afterwards unless kept on request.
- An explicit environment: ANSIBLE_CONFIG, collections and roles paths of our content.
- No secrets in extra vars or the environment: ansible-runner writes both to disk and puts extra
  vars on the command line; we refuse variable names that look like secrets and suppress the env
  files.
- Results are read from structured data (runner stats, set_stats), never from stdout.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Unpack

import ansible_runner

from kubegpu.content import KNOWN_TAGS, LAYER_TAGS, Content, find_content
from kubegpu.errors import InputError
from kubegpu.events import normalize
from kubegpu.options import RunOptions, check_options
from kubegpu.result import HostFailure, HostStats, RunResult

# An inventory file or directory, an inventory as a dict, or several of them (merged in order).
InventoryArg = str | Path | Mapping[str, Any] | Sequence[str | Path | Mapping[str, Any]]

# A name looks like a secret's when one of its words (split at _, - and camelCase) is one of
# these, or "pass" ends it (ansible_become_pass), or two of its words are a private/API/access/
# secret key. Names whose last word is file, path or dir name where a secret is, which is how
# secrets should be passed; an image pull secret names a Kubernetes Secret.
_SECRET_WORDS = frozenset(
    ("password", "passwd", "passphrase", "secret", "secrets", "token", "credential", "credentials")
)
_SECRET_PAIRS = frozenset(
    (("private", "key"), ("api", "key"), ("access", "key"), ("secret", "key"))
)
_PLACE_WORDS = frozenset(("file", "path", "dir"))
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def looks_secret(name: str) -> bool:
    """Whether a variable named ``name`` looks like it holds a secret."""
    words = [w.lower() for w in _WORD.findall(name)]
    if (
        not words
        or words[-1] in _PLACE_WORDS
        or words[-2:] in (["pull", "secret"], ["pull", "secrets"])
    ):
        return False
    return (
        words[-1] == "pass"
        or any(w in _SECRET_WORDS or w.endswith(("token", "password")) for w in words)
        or bool(set(itertools.pairwise(words)) & _SECRET_PAIRS)
    )


def _secret_names(value: Any, where: str) -> list[str]:
    """Where in ``value`` (mappings and lists, nested) a secret-looking name has a value."""
    found = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            path = f"{where}.{key}"
            if isinstance(key, str) and looks_secret(key) and item not in (None, "", {}, []):
                found.append(path)
            else:
                found += _secret_names(item, path)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found += _secret_names(item, f"{where}[{index}]")
    return found


def _check_tags(variable: str, tags: Iterable[str] | None) -> list[str]:
    result = [t.strip() for t in (tags or []) if t.strip()]
    unknown = sorted(set(result) - KNOWN_TAGS)
    if unknown:
        raise InputError(
            variable, f"unknown tag(s) {', '.join(unknown)}", ", ".join(sorted(KNOWN_TAGS))
        )
    return result


def tag_skips(tags: Sequence[str], skip_tags: Sequence[str]) -> dict[str, str]:
    """The layers of site.yml that tags or skip_tags leave out, and why. Preflight is tagged
    always as well, so only skip_tags leaves it out."""
    skipped = {}
    for layer in LAYER_TAGS:
        if layer in skip_tags:
            skipped[layer] = f"left out by skip_tags ({', '.join(skip_tags)})"
        elif tags and layer not in tags and layer != "preflight" and "all" not in tags:
            skipped[layer] = f"not among the tags asked for ({', '.join(tags)})"
    return skipped


def _check_extra_vars(extra_vars: Mapping[str, Any] | None) -> dict[str, Any]:
    result = dict(extra_vars or {})
    for name in result:
        # ASCII, as Ansible's own variable names: isidentifier() alone takes other scripts'
        # letters, and a look-alike name would slip past the secret check below.
        if not isinstance(name, str) or not name.isascii() or not name.isidentifier():
            raise InputError("extra_vars", f"{name!r} is not a valid variable name")
    found = _secret_names(result, "extra_vars")
    if found:
        raise InputError(
            found[0],
            "looks like a secret; ansible-runner writes extra vars to disk and the command line",
            "pass secrets in inventory files protected by ansible-vault, or as a *_file path",
        )
    return result


def _prepare_inventory(inventory: InventoryArg, workdir: Path) -> list[str]:
    """One or more inventory sources as absolute paths; a dict is written to the private dir."""
    if isinstance(inventory, (str, Path, Mapping)):
        return [_one_inventory(inventory, workdir)]
    sources = list(inventory)
    if not sources:
        raise InputError("inventory", "no inventory given", "an inventory file or directory")
    return [_one_inventory(item, workdir) for item in sources]


def _one_inventory(inventory: str | Path | Mapping[str, Any], workdir: Path) -> str:
    if isinstance(inventory, Mapping):
        found = _secret_names(inventory, "inventory")
        if found:
            raise InputError(
                found[0],
                "looks like a secret; an inventory given as a mapping is written to disk for "
                "ansible-runner",
                "pass secrets in inventory files protected by ansible-vault, or as a *_file path",
            )
        folder = workdir / "inventory"
        folder.mkdir(mode=0o700, exist_ok=True)
        path = folder / f"hosts{len(list(folder.iterdir()))}.json"
        path.write_text(json.dumps(inventory, indent=2))
        return str(path)
    path = Path(inventory).expanduser()
    if not path.exists():
        raise InputError("inventory", f"{path} does not exist", "an inventory file or directory")
    return str(path.resolve())


def keep_controller(limit: str, sources: list[str], workdir: Path) -> str:
    """Ansible's --limit, with the controller kept in it. kubegpu's playbooks run their checks
    of every input, the offline artifact check and the cluster layer in plays on localhost, and
    a plain limit (``gpu1``) leaves those out. The limit is resolved against the inventory here
    and handed to Ansible as a file of the hosts it selects, plus localhost. Raises InputError
    when the limit is malformed or selects no host."""
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    inventory = InventoryManager(loader=DataLoader(), sources=sources)
    try:
        inventory.subset(limit)
        names = [host.name for host in inventory.get_hosts("all")]
    except AnsibleError as exc:
        raise InputError(
            "limit", f"{limit!r} is not a host pattern: {exc}", _LIMIT_ALLOWED
        ) from exc
    if not names:
        raise InputError("limit", f"{limit!r} selects no host of the inventory", _LIMIT_ALLOWED)
    path = workdir / "limit"
    kept = [name for name in names if name != "localhost"] + ["localhost"]
    path.write_text("".join(f"{name}\n" for name in kept))
    return f"@{path}"


_LIMIT_ALLOWED = (
    "an Ansible host pattern that selects at least one host (gpu1, 'gpu*', 'all:!gpu2')"
)


STRATEGY_VARIABLE = "KUBEGPU_STRATEGY"
STRATEGIES = ("kubegpu", "linear", "mitogen")


def strategy_environment(strategy: str | None = None) -> dict[str, str]:
    """The Ansible settings for an execution strategy: `kubegpu` (the default, ansible.cfg's
    kubegpu.accel.linear: the accelerator's linear strategy, which steps aside to ansible-core's
    own on a release it was not tested on), `linear` (ansible-core's own) or `mitogen` (the
    optional extra `kubegpu[fast]`). Without an argument, $KUBEGPU_STRATEGY picks it. Raises
    InputError for an unknown name, or for mitogen when it is not installed."""
    name = (os.environ.get(STRATEGY_VARIABLE, "") if strategy is None else strategy).strip()
    if name in ("", "kubegpu"):
        return {}
    if name == "linear":
        return {"ANSIBLE_STRATEGY": "ansible.builtin.linear"}
    if name != "mitogen":
        raise InputError(
            STRATEGY_VARIABLE, f"{name!r} is not a known strategy", ", ".join(STRATEGIES)
        )
    try:
        import ansible_mitogen  # type: ignore[import-untyped]
    except ImportError as exc:
        raise InputError(
            STRATEGY_VARIABLE,
            "is 'mitogen' but the mitogen package is not installed",
            "pip install 'kubegpu[fast]', or unset it for Ansible's own strategy",
        ) from exc
    plugins = Path(ansible_mitogen.__file__).parent / "plugins" / "strategy"
    return {"ANSIBLE_STRATEGY_PLUGINS": str(plugins), "ANSIBLE_STRATEGY": "mitogen_linear"}


ACCEL_VARIABLE = "KUBEGPU_ACCEL"
# What KUBEGPU_ACCEL may say (any case), as the value the run gets.
ACCEL_VALUES = {
    **dict.fromkeys(("1", "true", "yes", "on"), "1"),
    **dict.fromkeys(("0", "false", "no", "off"), "0"),
}


def accel_environment(accel: bool | None = None) -> dict[str, str]:
    """KUBEGPU_ACCEL for the run: the argument where given, else $KUBEGPU_ACCEL (checked here,
    so that a wrong value is bad input, not a warning in the run); nothing where neither says."""
    if accel is not None:
        return {ACCEL_VARIABLE: "1" if accel else "0"}
    setting = os.environ.get(ACCEL_VARIABLE, "").strip()
    if not setting:
        return {}
    if setting.lower() not in ACCEL_VALUES:
        raise InputError(
            ACCEL_VARIABLE, f"{setting!r} is not on or off", "1 or 0, true or false, yes or no"
        )
    return {ACCEL_VARIABLE: ACCEL_VALUES[setting.lower()]}


def _environment(content: Content) -> dict[str, str]:
    bindir = str(Path(sys.executable).parent)
    env = {
        "ANSIBLE_CONFIG": str(content.ansible_cfg),
        "ANSIBLE_COLLECTIONS_PATH": str(content.collections_path),
        "ANSIBLE_ROLES_PATH": str(content.roles_path),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        # ansible-playbook from the interpreter running us (a venv need not be activated).
        "PATH": bindir + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
    }
    if os.environ.get("ANSIBLE_HOST_KEY_CHECKING"):
        env["ANSIBLE_HOST_KEY_CHECKING"] = os.environ["ANSIBLE_HOST_KEY_CHECKING"]
    env.update(strategy_environment())
    env.update(accel_environment())
    return env


def _collect(
    raw_events: list[dict[str, Any]],
    runner_stats: Mapping[str, Any] | None,
) -> tuple[
    dict[str, HostStats], list[HostFailure], list[HostFailure], dict[str, Any], dict[str, Any]
]:
    failed: list[HostFailure] = []
    unreachable: list[HostFailure] = []
    set_stats: dict[str, Any] = {}
    for raw in raw_events:
        event = normalize(raw)
        if event is None:
            continue
        if event.kind == "failed" and not event.ignored:
            failed.append(HostFailure(event.host, event.task, event.message))
        elif event.kind == "unreachable":
            unreachable.append(HostFailure(event.host, event.task, event.message))
        elif event.kind == "stats":
            artifact = event.data.get("artifact_data") or {}
            if isinstance(artifact, dict):
                set_stats = artifact
    hosts: dict[str, HostStats] = {}
    stats = runner_stats or {}
    names: set[str] = set()
    for counts in stats.values():
        if isinstance(counts, dict):
            names.update(counts)
    for name in sorted(names):
        hosts[name] = HostStats(
            ok=int(stats.get("ok", {}).get(name, 0)),
            changed=int(stats.get("changed", {}).get(name, 0)),
            failures=int(stats.get("failures", {}).get(name, 0)),
            unreachable=int(stats.get("dark", {}).get(name, 0)),
            skipped=int(stats.get("skipped", {}).get(name, 0)),
            rescued=int(stats.get("rescued", {}).get(name, 0)),
            ignored=int(stats.get("ignored", {}).get(name, 0)),
        )
    return hosts, failed, unreachable, set_stats, dict(stats)


def run_playbook(
    playbook: str | Path,
    inventory: InventoryArg,
    *,
    forks: int | None = None,
    verbosity: int = 0,
    timeout: int | None = None,
    content: Content | None = None,
    **options: Unpack[RunOptions],
) -> RunResult:
    """Run one playbook and return its structured result. Raises InputError on bad input.
    The options are kubegpu.options.RunOptions; forks, verbosity and timeout are Ansible's."""
    check_options("run_playbook", options)
    limit = options.get("limit")
    check = options.get("check", False)
    diff = options.get("diff", False)
    on_event = options.get("on_event")
    cancel = options.get("cancel")
    keep_artifacts = options.get("keep_artifacts", False)
    content = content or find_content()
    playbook_path = Path(playbook)
    if not playbook_path.is_absolute():
        playbook_path = content.root / playbook_path
    if not playbook_path.is_file():
        raise InputError("playbook", f"{playbook_path} does not exist")
    tag_list = _check_tags("tags", options.get("tags"))
    skip_list = _check_tags("skip_tags", options.get("skip_tags"))
    variables = _check_extra_vars(options.get("extra_vars"))
    if forks is not None and forks < 1:
        raise InputError("forks", f"{forks} is not a positive number", "1 or more")
    envvars = _environment(content)

    workdir = Path(tempfile.mkdtemp(prefix="kubegpu-run-"))
    os.chmod(workdir, 0o700)
    raw_events: list[dict[str, Any]] = []

    def handle(raw: dict[str, Any]) -> bool:
        raw_events.append(raw)
        if on_event is not None:
            event = normalize(raw)
            if event is not None:
                on_event(event)
        return True

    def cancelled() -> bool:
        return cancel is not None and cancel.is_set()

    try:
        inventory_arg = _prepare_inventory(inventory, workdir)
        if limit:
            limit = keep_controller(limit, inventory_arg, workdir)
        cmdline = " ".join(flag for flag, on in (("--check", check), ("--diff", diff)) if on)
        runner = ansible_runner.run(
            private_data_dir=str(workdir),
            playbook=str(playbook_path),
            inventory=inventory_arg,
            limit=limit,
            tags=",".join(tag_list) or None,
            skip_tags=",".join(skip_list) or None,
            extravars=variables or None,
            cmdline=cmdline or None,
            envvars=envvars,
            suppress_env_files=True,
            event_handler=handle,
            cancel_callback=cancelled,
            forks=forks,
            verbosity=verbosity or None,
            timeout=timeout,
            quiet=True,
        )
        hosts, failed, unreachable, set_stats, stats = _collect(raw_events, runner.stats)
        return RunResult(
            playbook=str(playbook_path),
            status=str(runner.status),
            rc=int(runner.rc if runner.rc is not None else -1),
            hosts=hosts,
            failed=failed,
            unreachable=unreachable,
            readiness=dict(set_stats.get("kubegpu_readiness") or {}),
            cluster_readiness=dict(set_stats.get("kubegpu_cluster_readiness") or {}),
            input_problems=[str(p) for p in set_stats.get("kubegpu_input_problems") or []],
            skipped_layers={
                **(tag_skips(tag_list, skip_list) if playbook_path.name == "site.yml" else {}),
                **{
                    str(k): str(v)
                    for k, v in (set_stats.get("kubegpu_skipped_layers") or {}).items()
                },
            },
            stats=stats,
            artifacts_dir=workdir if keep_artifacts else None,
        )
    finally:
        if not keep_artifacts:
            shutil.rmtree(workdir, ignore_errors=True)
