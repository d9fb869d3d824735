"""Bring a testbed up, take it down, report on it. Library code: returns data, never prints."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from kubegpu.testbed import aptrepo, gobuild, image, network, nodes, services, toolkit_build
from kubegpu.testbed._proc import (
    all_pids,
    ancestors,
    pid_alive,
    read_cmdline,
    run,
    write_file,
)
from kubegpu.testbed.config import TestbedConfig, check_host, default_state_dir, validate
from kubegpu.testbed.errors import TestbedError, TestbedInputError
from kubegpu.testbed.inventory import inventory_data, write_inventory, write_known_hosts

STATE_VERSION = 1
BRIDGE_ALIAS_PREFIX = "kubegpu-testbed:"
# Programs a testbed starts; a leftover process is ours only when it is one of these AND its
# command line names our state folder.
OWNED_PROGRAMS = ("launcher.py", "systemd-nspawn", "apt-cacher-ng", "http.server", "gpg-agent")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class NodeState:
    name: str
    address: str
    containers: bool
    simulated_gpu: str | None
    launcher_pid: int | None
    nspawn_pid: int | None
    running: bool
    boot_seconds: float | None = None


@dataclass(frozen=True)
class TestbedState:
    """A testbed as recorded in its state folder (and, for `running`, as found on the host)."""

    __test__ = False

    config: TestbedConfig
    state_dir: Path
    phase: str
    bridge: str
    bridge_address: str
    nodes: tuple[NodeState, ...]
    inventory: Path
    ssh_key: Path
    known_hosts: Path
    apt_proxy_url: str
    vendor_repo_url: str
    vendor_repo_key: Path
    services: dict[str, int | None] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)

    @property
    def addresses(self) -> dict[str, str]:
        return {n.name: n.address for n in self.nodes}

    @property
    def running(self) -> bool:
        return self.phase == "up" and bool(self.nodes) and all(n.running for n in self.nodes)

    def ssh_argv(self, node: str, *command: str) -> list[str]:
        """argv that runs command on node over SSH, host key checked against known_hosts."""
        address = self.addresses.get(node)
        if address is None:
            raise TestbedInputError("node", f"{node!r} is not a node", ", ".join(self.node_names))
        return nodes.ssh_argv(self.ssh_key, self.known_hosts, address, *command)


@dataclass(frozen=True)
class DownReport:
    state_dir: Path
    found: bool  # False when there was nothing to take down
    nodes_stopped: tuple[str, ...]
    killed: tuple[int, ...]  # PIDs that needed SIGKILL (a crash, a hung node)
    unmounted: bool
    bridge_removed: bool
    remaining: tuple[str, ...]  # anything that could not be removed (empty when clean)
    seconds: float


def _state_file(state_dir: Path) -> Path:
    return state_dir / "state.json"


def _read_raw(state_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(_state_file(state_dir).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _save_raw(state_dir: Path, data: dict[str, Any]) -> None:
    write_file(_state_file(state_dir), json.dumps(data, indent=2, sort_keys=True) + "\n", 0o600)


def load_state(state_dir: Path | None = None) -> TestbedState | None:
    """The testbed recorded in state_dir (default: KUBEGPU_TESTBED_STATE or /run/...)."""
    state_dir = state_dir or default_state_dir()
    raw = _read_raw(state_dir)
    if raw is None or raw.get("version") != STATE_VERSION:
        return None
    return _to_state(state_dir, raw)


def _to_state(state_dir: Path, raw: dict[str, Any]) -> TestbedState:
    marker = str(state_dir)
    node_states = []
    for name, info in raw.get("nodes", {}).items():
        paths = nodes.NodePaths(Path(info["dir"]))
        lpid = _int_or_none(paths.launcher_pid)
        npid = _int_or_none(paths.nspawn_pid)
        node_states.append(
            NodeState(
                name=name,
                address=info["address"],
                containers=bool(info.get("containers")),
                simulated_gpu=info.get("simulated_gpu"),
                launcher_pid=lpid,
                nspawn_pid=npid,
                running=bool(lpid and nodes.owned_pid(lpid, marker)),
                boot_seconds=info.get("boot_seconds"),
            )
        )
    svc = {
        k: (v if v and nodes.owned_pid(v, marker) else None)
        for k, v in raw.get("services", {}).items()
    }
    return TestbedState(
        config=TestbedConfig.from_dict(raw["config"]),
        state_dir=state_dir,
        phase=raw.get("phase", "unknown"),
        bridge=raw.get("bridge", ""),
        bridge_address=raw.get("bridge_address", ""),
        nodes=tuple(node_states),
        inventory=state_dir / "inventory.yml",
        ssh_key=state_dir / "id_ed25519",
        known_hosts=state_dir / "known_hosts",
        apt_proxy_url=raw.get("apt_proxy_url", ""),
        vendor_repo_url=raw.get("vendor_repo_url", ""),
        vendor_repo_key=Path(raw.get("vendor_repo_key", "")),
        services=svc,
        timings=raw.get("timings", {}),
    )


def _int_or_none(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def status(state_dir: Path | None = None) -> TestbedState | None:
    """Same as load_state: the recorded testbed with each node's live state."""
    return load_state(state_dir)


def _hosts_entries(mirror: image.Mirror) -> str:
    """This host's /etc/hosts lines for the mirror's host names (nodes get the same)."""
    wanted = {urlparse(u).hostname for u in (mirror.archive, mirror.security)} - {None}
    lines = []
    try:
        text = Path("/etc/hosts").read_text()
    except OSError:
        return ""
    for line in text.splitlines():
        fields = line.split("#")[0].split()
        if len(fields) >= 2 and wanted & set(fields[1:]):
            lines.append(line.strip() + "\n")
    return "".join(lines)


def _apt_extra() -> str:
    """apt settings of this host that nodes need too (a mirror that serves old snapshots
    needs Check-Valid-Until off)."""
    proc = run(["apt-config", "dump"], what="reading the host's apt settings", check=False)
    keep = []
    for line in proc.stdout.splitlines():
        if line.startswith(("Acquire::Check-Valid-Until ", "Acquire::Check-Date ")):
            keep.append(line.strip() + "\n")
    return "".join(keep)


def _check_bridge(config: TestbedConfig, raw: dict[str, Any] | None) -> None:
    if not network.link_exists(config.bridge):
        return
    alias = Path("/sys/class/net", config.bridge, "ifalias").read_text().strip()
    if alias != BRIDGE_ALIAS_PREFIX + str(config.state_dir):
        raise TestbedInputError(
            "bridge",
            f"{config.bridge} already exists and was not created by this testbed",
            "another bridge name (--bridge)",
        )


def _simulator(pairs: tuple[tuple[str, str], ...]) -> Any:
    """kubegpu.simulate (imported only when asked for), with every capture checked."""
    try:
        from kubegpu import simulate
    except ImportError as exc:
        raise TestbedInputError(
            "simulate_gpu", f"kubegpu.simulate is not available ({exc})", "no simulated GPU"
        ) from None
    for name, capture in pairs:
        try:
            simulate.resolve_capture(capture)
        except ValueError as exc:
            raise TestbedInputError("simulate_gpu", f"{name}: {exc}", "a real capture") from None
    return simulate


def _build_toolkit(say: Progress) -> float:
    """Build (or find cached) NVIDIA's container toolkit programs for every release the vendor
    repository serves, before anything is created; the seconds it took."""
    started = time.monotonic()
    for version in aptrepo.VERSIONS:
        upstream = version.split("-")[0]
        try:
            built = toolkit_build.build(upstream)
        except toolkit_build.ToolkitBuildError as exc:
            raise TestbedError(
                f"the vendor repository carries NVIDIA's container toolkit {upstream} built from"
                f" its Go module, and that build failed: {exc}"
            ) from None
        say(f"NVIDIA's container toolkit {upstream}: " + ("cached" if built["cached"] else "built"))
    return round(time.monotonic() - started, 2)


def up(config: TestbedConfig, progress: Progress | None = None) -> TestbedState:
    """Bring the testbed up (idempotent: an identical running testbed is returned as is)."""
    say = progress or (lambda _msg: None)
    addressing = validate(config)
    recipe = image.Recipe(suite=config.suite, mirror=image.host_mirror(config.mirror))
    need_build = image.cached_image(config.cache_dir, recipe) is None
    check_host(need_debootstrap=need_build)
    state_dir = config.state_dir
    raw = _read_raw(state_dir)
    if raw is not None:
        current = load_state(state_dir)
        if current is not None and current.running:
            if current.config == config:
                say(f"testbed in {state_dir} is already up")
                return current
            raise TestbedInputError(
                "state_dir",
                f"a testbed with another configuration is up in {state_dir}",
                "`kubegpu testbed down` first, or another --state-dir",
            )
    _check_bridge(config, raw)
    network.check_subnet_free(addressing.network, config.bridge)
    for variable, port in (("proxy_port", config.proxy_port), ("repo_port", config.repo_port)):
        if services.port_in_use(port):
            raise TestbedInputError(
                variable, f"port {port} is already taken on every address", "a free port"
            )
    simulator = _simulator(config.simulate_gpu) if config.simulate_gpu else None
    toolkit_seconds = _build_toolkit(say)
    if raw is not None:
        say("cleaning up what a previous testbed left")
        down(state_dir)

    started = time.monotonic()
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    bridge_ip = str(addressing.bridge)
    data: dict[str, Any] = {
        "version": STATE_VERSION,
        "config": config.to_dict(),
        "phase": "starting",
        "bridge": config.bridge,
        "bridge_address": bridge_ip,
        "nodes": {},
        "services": {},
        "timings": {"toolkit_build_seconds": toolkit_seconds},
    }
    _save_raw(state_dir, data)
    try:
        say(f"base image ({config.suite}): " + ("building" if need_build else "cached"))
        base = image.ensure_base_image(config.cache_dir, recipe)
        data["timings"]["image_build_seconds"] = round(base.seconds, 2)
        key = state_dir / "id_ed25519"
        if not key.exists():
            run(
                [
                    "ssh-keygen",
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    "kubegpu-testbed-operator",
                    "-f",
                    key,
                ],
                what="making the operator key",
            )
        say(f"bridge {config.bridge} {bridge_ip}/{addressing.prefixlen}")
        network.create_bridge(config.bridge, addressing)
        run(
            ["ip", "link", "set", config.bridge, "alias", BRIDGE_ALIAS_PREFIX + str(state_dir)],
            what="marking the bridge as the testbed's",
        )
        data["bridge_created"] = True
        _save_raw(state_dir, data)

        say(f"apt-cacher-ng on {bridge_ip}:{config.proxy_port}")
        pid, proxy_url = services.start_apt_proxy(
            state_dir / "apt-cacher-ng",
            config.cache_dir / "apt-cacher-ng" / config.bridge,
            bridge_ip,
            config.proxy_port,
        )
        data["services"]["apt-cacher-ng"] = pid
        data["apt_proxy_url"] = proxy_url
        _save_raw(state_dir, data)

        say("vendor repository: NVIDIA's toolkit built from source, libnvidia-container doubles")
        repo = aptrepo.build_repo(state_dir / "vendor-repo")
        pid = services.start_repo_server(
            state_dir / "vendor-repo", repo.root, bridge_ip, config.repo_port
        )
        data["services"]["vendor-repo"] = pid
        repo_url = f"http://{bridge_ip}:{config.repo_port}/{aptrepo.REPO_PATH}"
        data["vendor_repo_url"] = repo_url
        data["vendor_repo_key"] = str(repo.keyring)
        _save_raw(state_dir, data)
        services.http_get(f"{repo_url}/{aptrepo.FLAT_DIR}/InRelease")

        names = config.node_names
        hosts_entries = _hosts_entries(recipe.mirror) + "".join(
            f"{addr}\t{name}\n" for name, addr in zip(names, addressing.nodes, strict=True)
        )
        ctx = nodes.NodeContext(
            state_dir=state_dir,
            bridge=config.bridge,
            bridge_address=bridge_ip,
            proxy_url=proxy_url,
            operator_pubkey=key.with_suffix(".pub").read_text(),
            hosts_entries=hosts_entries,
            apt_extra=_apt_extra(),
        )
        captures = dict(config.simulate_gpu)
        host_keys = []
        specs = []
        for name, addr in zip(names, addressing.nodes, strict=True):
            spec = nodes.NodeSpec(
                name=name,
                address=str(addr),
                prefixlen=addressing.prefixlen,
                containers=name in config.containers,
                simulate_capture=captures.get(name),
            )
            paths = nodes.NodePaths(state_dir / "nodes" / name)
            data["nodes"][name] = {
                "address": spec.address,
                "dir": str(paths.dir),
                "containers": spec.containers,
                "simulated_gpu": spec.simulate_capture,
            }
            _save_raw(state_dir, data)
            nodes.mount_overlay(paths, base.rootfs)
            host_keys.append((name, spec.address, nodes.personalise(paths, spec, ctx)))
            if spec.containers:
                nodes.prepare_containerd_dir(paths)
            if spec.simulate_capture is not None:
                install_simulated_gpu(paths.root, spec.simulate_capture, simulator)
            specs.append((spec, paths))
        known_hosts = state_dir / "known_hosts"
        write_known_hosts(known_hosts, host_keys)

        raised = raise_inotify_limit(len(specs), holder=state_dir)
        if raised is not None:
            say(
                f"fs.inotify.max_user_instances raised from {raised[0]} to {raised[1]} "
                f"(each booted node's systemd, udevd and services hold inotify instances)"
            )
        say(f"booting {len(specs)} node(s)")
        boot_started = {}
        for spec, paths in specs:
            boot_started[spec.name] = time.monotonic()
            data["nodes"][spec.name]["launcher_pid"] = nodes.start(paths, spec, ctx)
            _save_raw(state_dir, data)
        for spec, paths in specs:
            lpid = data["nodes"][spec.name]["launcher_pid"]
            state = nodes.wait_ready(
                spec.name, spec.address, key, known_hosts, lpid, paths.console_log
            )
            seconds = round(time.monotonic() - boot_started[spec.name], 2)
            data["nodes"][spec.name]["boot_seconds"] = seconds
            data["nodes"][spec.name]["systemd_state"] = state
            say(f"{spec.name} {spec.address}: {state} after {seconds} s")
        group_vars = {
            "kubegpu_testbed": True,
            "kubegpu_testbed_apt_proxy": proxy_url,
            "kubegpu_testbed_vendor_repo_url": repo_url,
            "kubegpu_testbed_vendor_repo_key": str(repo.keyring),
            "kubegpu_testbed_vendor_repo_key_url": f"{repo_url}/gpgkey.gpg",
            "kubegpu_testbed_vendor_repo_versions": list(repo.versions),
        }
        inv_nodes = []
        for spec, _paths in specs:
            host_vars: dict[str, Any] = {"kubegpu_testbed_containers": spec.containers}
            if spec.simulate_capture is not None:
                host_vars["kubegpu_testbed_simulated_gpu"] = {
                    "capture": spec.simulate_capture,
                    "nvidia_smi": nodes.SIMULATED_SMI,
                    "host_root": nodes.SIMULATED_ROOT,
                }
                # The readiness checks read the SIMULATED GPU with this inventory alone
                # (`kubegpu check -i STATE/inventory.yml`).
                host_vars["kubegpu_nvidia_smi"] = nodes.SIMULATED_SMI
                host_vars["kubegpu_host_root"] = nodes.SIMULATED_ROOT
            inv_nodes.append({"name": spec.name, "address": spec.address, "vars": host_vars})
        write_inventory(
            state_dir / "inventory.yml",
            inventory_data(inv_nodes, key=key, known_hosts=known_hosts, group_vars=group_vars),
        )
        data["phase"] = "up"
        data["timings"]["up_seconds"] = round(time.monotonic() - started, 2)
        _save_raw(state_dir, data)
    except BaseException:
        down(state_dir)
        raise
    result = load_state(state_dir)
    assert result is not None
    return result


INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")
# Instances per booted node to allow for: a Debian node with containerd holds about 9 right after
# boot (systemd, journald, logind, udevd when a package starts it, ...).
INOTIFY_PER_NODE = 32


# What the testbeds changed on the host: the limit found before the first raised it, and the
# state folders of the testbeds up since. The last one down puts the limit back.
INOTIFY_RECORD = Path("/run/kubegpu-inotify.json")


def raise_inotify_limit(
    node_count: int,
    path: Path = INOTIFY_INSTANCES,
    *,
    holder: Path | None = None,
    record: Path = INOTIFY_RECORD,
) -> tuple[int, int] | None:
    """Make sure the host allows enough inotify instances for node_count more nodes (all run as
    root, so they share root's limit with everything else on the host). Linux's default of 128
    runs out at about 12 nodes: systemd-udevd then fails to start inside a node and every
    package that needs udev (the NVIDIA driver's) fails to configure. Only ever raises the
    limit; returns (old, new) when it did, None when it was high enough or cannot be read.
    holder (a testbed's state folder) is recorded, so that restore_inotify_limit puts the
    host's own value back when the last testbed that needed more goes down."""
    try:
        current = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    wanted = max(512, INOTIFY_PER_NODE * node_count + 256)
    with _record_locked(record):
        return _raise_inotify_limit(path, record, current, wanted, holder)


def _raise_inotify_limit(
    path: Path, record: Path, current: int, wanted: int, holder: Path | None
) -> tuple[int, int] | None:
    held = _read_json(record)
    if holder is not None and (current < wanted or held):
        held.setdefault("original", current)
        held["holders"] = sorted({*held.get("holders", []), str(holder)})
        write_file(record, json.dumps(held))
    if current >= wanted:
        return None
    path.write_text(f"{wanted}\n")
    return current, wanted


def restore_inotify_limit(
    holder: Path, path: Path = INOTIFY_INSTANCES, record: Path = INOTIFY_RECORD
) -> int | None:
    """The host's own limit back once no recorded testbed holds it; returns the value put back
    (None while another testbed still needs it, or when none was raised)."""
    with _record_locked(record):
        return _restore_inotify_limit(holder, path, record)


def _restore_inotify_limit(holder: Path, path: Path, record: Path) -> int | None:
    held = _read_json(record)
    if not held:
        return None
    holders = [h for h in held.get("holders", []) if h != str(holder)]
    if holders:
        write_file(record, json.dumps(dict(held, holders=holders)))
        return None
    original = int(held["original"])
    with contextlib.suppress(OSError):
        path.write_text(f"{original}\n")
    record.unlink(missing_ok=True)
    return original


def _record_locked(record: Path) -> contextlib.AbstractContextManager[None]:
    """Testbeds that go up and down at the same time (the 2.21 leg's beside a suite's) read and
    write the record one at a time, so that no holder is lost."""
    return gobuild.locked(record.parent, record.name + ".lock")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def install_simulated_gpu(root: Path, capture: str, simulator: Any) -> None:
    """Put the replaying nvidia-smi and the simulated host root into a node: both in
    kubegpu-simulated folders of their own, so that no real binary is ever replaced."""
    smi = root / nodes.SIMULATED_SMI.lstrip("/")
    host_root = root / nodes.SIMULATED_ROOT.lstrip("/")
    script = simulator.write_replay(smi.parent, capture)
    if script != smi:
        raise TestbedError(f"the replay script landed at {script}, not {smi}")
    # Inside the node, the layers above the GPU are read from the node's real folders.
    simulator.build_simulated_host_root(host_root, capture, real_root=Path("/"))


def _owned_processes(state_dir: Path) -> list[int]:
    marker = str(state_dir)
    spare = ancestors(os.getpid())
    found = []
    for pid in all_pids():
        if pid in spare:
            continue
        argv = read_cmdline(pid)
        if not argv or not nodes.mentions_path(argv, marker):
            continue
        if any(prog in a for a in argv[:3] for prog in OWNED_PROGRAMS):
            found.append(pid)
    return found


def _lingering(pid: int, marker: str) -> bool:
    """pid is still one of ours, or a zombie not reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] == "Z" or nodes.owned_pid(pid, marker)


def _cgroup_leftovers(state_dir: Path) -> list[Path]:
    prefix = nodes.cgroup_name(state_dir, "")
    found: list[Path] = []
    root = Path("/sys/fs/cgroup")
    for folder, dirs, _files in os.walk(root):
        for name in list(dirs):
            if name.startswith(prefix):
                found.append(Path(folder) / name)
                dirs.remove(name)
        if len(Path(folder).relative_to(root).parts) >= 4:
            dirs.clear()
    return found


def down(state_dir: Path | None = None) -> DownReport:
    """Stop and remove everything the testbed in state_dir made. Idempotent, and works after
    a crash: besides the state file it scans for processes, mounts, links and cgroups that name
    this state folder."""
    state_dir = state_dir or default_state_dir()
    started = time.monotonic()
    raw = _read_raw(state_dir) or {}
    found = state_dir.exists()
    marker = str(state_dir)
    stopped: list[str] = []
    killed: list[int] = []
    node_dirs = sorted((state_dir / "nodes").glob("*")) if (state_dir / "nodes").is_dir() else []
    for folder in node_dirs:
        paths = nodes.NodePaths(folder)
        killed += nodes.stop(paths, marker)
        stopped.append(folder.name)
    for pid in raw.get("services", {}).values():
        if pid and nodes.owned_pid(pid, marker):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = _owned_processes(state_dir)
        if not left:
            break
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM if time.monotonic() < deadline - 5 else signal.SIGKILL)
        time.sleep(0.2)
    for pid in _owned_processes(state_dir):
        killed.append(pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    tops = _cgroup_leftovers(state_dir)
    for pid in nodes.cgroup_pids(tops):
        if pid_alive(pid):
            killed.append(pid)
            os.kill(pid, signal.SIGKILL)
    nodes.remove_cgroups(tops)
    # Our detached processes are children of PID 1, which may reap them a little later.
    gone_deadline = time.monotonic() + 15
    waited = set(killed) | {p for p in raw.get("services", {}).values() if p}
    waited |= {n.get("launcher_pid") for n in raw.get("nodes", {}).values()} - {None}
    while time.monotonic() < gone_deadline and any(_lingering(p, marker) for p in waited):
        time.sleep(0.1)
    remaining = nodes.unmount_under(state_dir)
    bridge_removed = False
    for link in Path("/sys/class/net").iterdir():
        try:
            alias = (link / "ifalias").read_text().strip()
        except OSError:
            continue
        if alias == BRIDGE_ALIAS_PREFIX + marker:
            network.delete_link(link.name)
            bridge_removed = True
    leftovers = [f"mount {p}" for p in remaining]
    leftovers += [f"process {p}" for p in _owned_processes(state_dir)]
    if not leftovers and state_dir.exists():
        shutil.rmtree(state_dir, ignore_errors=True)
    if not leftovers:
        restore_inotify_limit(state_dir)
    return DownReport(
        state_dir=state_dir,
        found=found or bool(killed) or bridge_removed,
        nodes_stopped=tuple(stopped),
        killed=tuple(killed),
        unmounted=not remaining,
        bridge_removed=bridge_removed,
        remaining=tuple(leftovers),
        seconds=round(time.monotonic() - started, 2),
    )
