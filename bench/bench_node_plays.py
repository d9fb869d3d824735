"""What the node plays of site.yml cost when there is nothing to change, next to plain Ansible.

    python bench/bench_node_plays.py [--nodes 1,4,8,16] [--quick] [--configs LIST] [--json FILE]

Needs root (it brings up its own testbed: prefix bn, bridge kgtb3, subnet 10.213.3.0/24, state
/run/kubegpu-testbed-bn unless told otherwise) and takes it down at the end, also on Ctrl-C or a
failure (--keep-up leaves it up; --reuse takes an up one as it is). Steps:

1. the first converge of playbooks/nodes.yml (packages through the testbed's apt proxy): one fresh
   node alone, then three more fresh nodes (4 in all), then any others four at a time, each timed;
2. for each N of --nodes (the first N nodes, through --limit), side by side in the same run:
   the floor (`ansible all -m ping`) and the no-change run of the node plays under each
   configuration of --configs:
     plain    ansible-core's defaults: an ansible.cfg that only says where the roles and
              collections are (forks 5, no pipelining, implicit gathering, no fact cache);
     cache    plain + `gathering = smart` and the jsonfile fact cache (warm);
     ours     the repository's ansible.cfg (cache + pipelining, ControlPersist 120s, forks 16);
     mitogen  ours + mitogen's strategy (KUBEGPU_STRATEGY=mitogen, the extra kubegpu[fast]);
     at-REF   ours, with the content (roles, modules, playbooks) of git revision REF
              (`--configs at-HEAD`: the roles before the edits in the working tree).
   Every no-change run must report changed=0 and failed=0; otherwise it is printed loudly and
   the script exits 1 after printing the table.
3. the slowest tasks of the no-change run (--profile-config, default ours) at the largest N, and
   the tasks that cost the main ansible process the most CPU (the serial part of a run).

What a row says:
- host-tasks: results of tasks that ran for a host (ok, changed or failed), summed over hosts,
  gathering facts included; `remote` of them ran a module on the node, the rest were actions
  that stay on the controller (set_fact, assert, include_vars, validate_argument_spec, ...).
  Skipped results are counted apart. execs: module executions on the nodes (a loop runs the
  module once per item).
- ctl CPU: user+system CPU of the whole process tree of the ansible command (RUSAGE_CHILDREN of a
  wrapper that is a child subreaper, so the SSH ControlPersist masters, which detach, are
  counted too; the wrapper stops them when the command has exited and reaps them).
- node CPU: the growth of usage_usec in cpu.stat of the nodes' own cgroups (cgroup v2) during the
  command, summed over the N nodes.
- ms/ht: CPU per host-task. total = ctl + node.
- CPU s/host: ctl + node CPU divided by the number of nodes, the whole run's cost per node;
  unlike ms/ht it also falls when a change needs fewer tasks for the same work.
- RSS: peak of the summed PSS of the tree (sampled every 0.25 s from /proc/PID/smaps_rollup),
  and in brackets ru_maxrss, the largest single process of the tree.
- plain/x: wall of `plain` divided by the wall of this row, same N.

Figures are printed, never asserted. Progress goes to stderr, the tables to stdout.
Here (2 shared cores) the nodes and the controller share the same CPUs, so node CPU is wall time
too; on a real fleet the node side runs in parallel.
"""

from __future__ import annotations

import argparse
import configparser
import contextlib
import ctypes
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from kubegpu.runner import strategy_environment  # noqa: E402
from kubegpu.testbed import TestbedConfig, TestbedState, down, load_state, up  # noqa: E402
from kubegpu.testbed.nodes import NodePaths, recorded_cgroups  # noqa: E402

BIN = Path(sys.executable).parent
CALLBACKS = Path(__file__).resolve().parent / "callback_plugins"
PLAYBOOK = Path("playbooks/nodes.yml")
CONTROLLER_ACTIONS = {
    "add_host",
    "assert",
    "checks",  # kubegpu.gpu.checks, an action plugin that never connects
    "debug",
    "fail",
    "group_by",
    "import_role",
    "import_tasks",
    "include_role",
    "include_tasks",
    "include_vars",
    "meta",
    "pause",
    "set_fact",
    "set_stats",
    "validate_argument_spec",
}
KNOWN_CONFIGS = ("plain", "cache", "ours", "mitogen")
PR_SET_CHILD_SUBREAPER = 36


def cpu_model() -> str:
    """The CPU's model name, model number and BogoMIPS (/proc/cpuinfo), so that figures of
    different days say whether they came from the same kind of machine (a VM's model name is
    often the bare "Intel(R) Xeon(R) Processor")."""
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    if "model name" not in fields:
        return platform.processor() or "unknown CPU"
    model, bogomips = fields.get("model", "?"), fields.get("bogomips", "?")
    return f"{fields['model name']}, model {model}, {bogomips} BogoMIPS"


def say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the measuring wrapper: runs one command as a child subreaper -------------------------------


def measure_child(out: Path, log: Path, argv: list[str]) -> int:
    """Run argv (output to log), stop what it left behind, write its tree's rusage to out."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    started = time.perf_counter()
    with log.open("ab") as handle:
        proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT)
        rc = proc.wait()
    wall = time.perf_counter() - started
    # ControlPersist masters detached from ansible and were handed to us: stop and reap them.
    me = os.getpid()
    deadline = time.monotonic() + 10
    while True:
        left = [pid for pid, parent in _parents().items() if parent == me]
        if not left:
            break
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL if time.monotonic() > deadline else signal.SIGTERM)
        time.sleep(0.05)
        _reap()
    _reap()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    out.write_text(
        json.dumps(
            {
                "rc": rc,
                "wall": wall,
                "cpu": usage.ru_utime + usage.ru_stime,
                "maxrss_kb": usage.ru_maxrss,
            }
        )
    )
    return 0


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _parents() -> dict[int, int]:
    found: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            text = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        found[int(entry.name)] = int(text.rpartition(")")[2].split()[1])
    return found


def _tree(root: int) -> list[int]:
    parents = _parents()
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def _pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


class TreeSampler(threading.Thread):
    """Peak of the summed PSS of a process tree, sampled every 0.25 s."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.peak_kb = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.25):
            total = sum(_pss_kb(pid) for pid in _tree(self.root) if pid != self.root)
            self.peak_kb = max(self.peak_kb, total)


# --- measuring one ansible command ---------------------------------------------------------------


@dataclass
class Run:
    label: str
    config: str
    nodes: int
    rc: int = 0
    wall: float = 0.0
    ctl_cpu: float = 0.0
    node_cpu: float = 0.0
    peak_pss_mb: float = 0.0
    maxrss_mb: float = 0.0
    host_tasks: int = 0
    remote: int = 0
    execs: int = 0
    skipped: int = 0
    items: int = 0
    gathered: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    tasks: list[dict[str, Any]] = field(default_factory=list, repr=False)
    log: str = ""


def ansible_core_version() -> str:
    """The ansible-core the bench runs (the one beside this Python)."""
    from ansible.release import __version__

    return str(__version__)


CGROUP_ROOT = Path("/sys/fs/cgroup")
# Where this process sees the host's /sys/fs/cgroup (--cgroup-root: elsewhere when the bench
# runs in a container controller, scripts/leg-ansible-latest --run).
cgroup_seen = CGROUP_ROOT


def node_cgroup_cpu(state: TestbedState, names: Sequence[str]) -> float:
    """Seconds of CPU used so far by these nodes' cgroups: usage_usec of the cgroup v2 cpu.stat
    (the v1 cpu controller's cpu.stat has no usage; cpuacct.usage is the fallback)."""
    total = 0.0
    for name in names:
        groups = [
            cgroup_seen / group.relative_to(CGROUP_ROOT)
            if group.is_relative_to(CGROUP_ROOT)
            else group
            for group in recorded_cgroups(NodePaths(state.state_dir / "nodes" / name).cgroups)
        ]
        found = None
        for group in groups:
            stat = group / "cpu.stat"
            if stat.is_file():
                for line in stat.read_text().splitlines():
                    if line.startswith("usage_usec "):
                        found = int(line.split()[1]) / 1e6
        if found is None:
            for group in groups:
                if (group / "cpuacct.usage").is_file():
                    found = int((group / "cpuacct.usage").read_text()) / 1e9
        if found is None:
            raise RuntimeError(f"no CPU accounting found in the cgroups of node {name}: {groups}")
        total += found
    return total


def measure(
    label: str,
    config: str,
    argv: list[str],
    env: dict[str, str],
    state: TestbedState,
    names: Sequence[str],
    workdir: Path,
) -> Run:
    run = Run(label=label, config=config, nodes=len(names))
    slug = f"{len(names):02d}-{label}".replace("/", "_").replace(" ", "_")
    out, log, events = (workdir / f"{slug}.{ext}" for ext in ("rusage.json", "log", "tasks.json"))
    for path in (out, events):
        path.unlink(missing_ok=True)
    env = dict(env, KUBEGPU_BENCH_OUT=str(events))
    # A fresh control socket folder per command: no connection is reused from an earlier one.
    control = Path(tempfile.mkdtemp(prefix="cp-", dir=workdir))
    env["ANSIBLE_SSH_CONTROL_PATH_DIR"] = str(control)
    wrapper = [sys.executable, str(Path(__file__).resolve()), "--measure-child", str(out), str(log)]
    node0 = node_cgroup_cpu(state, names)
    proc = subprocess.Popen(
        [*wrapper, "--", *argv], cwd=env.get("KUBEGPU_BENCH_CWD", REPO), env=env
    )
    sampler = TreeSampler(proc.pid)
    sampler.start()
    try:
        proc.wait()
    except BaseException:
        # Ctrl-C or SIGTERM: stop the ansible command and all it started, then go on unwinding.
        for pid in reversed(_tree(proc.pid)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
        raise
    sampler.stop.set()
    sampler.join()
    run.node_cpu = node_cgroup_cpu(state, names) - node0
    shutil.rmtree(control, ignore_errors=True)
    usage = json.loads(out.read_text())
    run.rc, run.wall, run.ctl_cpu = usage["rc"], usage["wall"], usage["cpu"]
    run.maxrss_mb = usage["maxrss_kb"] / 1024
    run.peak_pss_mb = sampler.peak_kb / 1024
    run.log = str(log)
    if events.is_file():
        data = json.loads(events.read_text())
        run.tasks = data["tasks"]
        for task in run.tasks:
            action = task["action"].rpartition(".")[2]
            statuses = list(task["hosts"].values())
            ran = sum(s in ("ok", "changed", "failed", "ignored") for s in statuses)
            run.host_tasks += ran
            if action not in CONTROLLER_ACTIONS:
                run.remote += ran
                # A loop runs the module once per item.
                run.execs += task["items"] if task["items"] else ran
            if action in ("gather_facts", "setup"):
                run.gathered += ran
            run.skipped += statuses.count("skipped")
            run.items += task["items"]
        for counts in data["recap"].values():
            run.changed += counts.get("changed", 0)
            run.failed += counts.get("failures", 0)
            run.unreachable += counts.get("unreachable", 0)
    elif config != "floor":
        run.failed = run.failed or 1
    return run


# --- configurations ------------------------------------------------------------------------------


@dataclass
class Config:
    name: str
    env: dict[str, str]
    root: Path  # where the playbook, the inventories/testbed overlay and the content are


def make_configs(names: Sequence[str], workdir: Path, facts: Path) -> dict[str, Config]:
    base = {
        "ANSIBLE_CALLBACK_PLUGINS": str(CALLBACKS),
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        # The compiled Jinja code of kubegpu.accel.jinja_code_cache, filled by the converges.
        "KUBEGPU_JINJA_CODE_CACHE_DIR": str(workdir / "jinja-code"),
        # kubegpu.accel.ansiballz_bytecode's compiled module_utils, filled the same way.
        "KUBEGPU_ANSIBALLZ_BYTECODE_CACHE_DIR": str(workdir / "ansiballz-bytecode"),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
    }
    base.update(
        {k: v for k, v in os.environ.items() if k in ("HOME", "LANG", "LC_ALL", "TERM", "USER")}
    )
    roles = REPO / "collections/ansible_collections/kubegpu/gpu/roles"
    plain_cfg = workdir / "plain.cfg"
    plain_cfg.write_text(
        "# ansible-core defaults: only where our roles and collections are.\n"
        f"[defaults]\nroles_path = {roles}\ncollections_path = {REPO / 'collections'}\n"
    )
    cache_cfg = workdir / "cache.cfg"
    cache_cfg.write_text(
        plain_cfg.read_text()
        + "# the fact lever: minimal gathering is in the play; this adds the cache.\n"
        + f"gathering = smart\nfact_caching = jsonfile\nfact_caching_connection = {facts}\n"
        + "fact_caching_timeout = 3600\n"
    )
    ours = {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(facts),
    }
    configs: dict[str, Config] = {}
    for spec in names:
        # "base:NAME=VALUE:..." is the base configuration with these environment settings on top.
        name, *overrides = spec.split(":")
        extra = dict(item.split("=", 1) for item in overrides)
        if name == "plain":
            made = Config(name, dict(base, ANSIBLE_CONFIG=str(plain_cfg)), REPO)
        elif name == "cache":
            made = Config(name, dict(base, ANSIBLE_CONFIG=str(cache_cfg)), REPO)
        elif name == "ours":
            made = Config(name, dict(base, **ours), REPO)
        elif name == "mitogen":
            made = Config(name, dict(base, **ours, **strategy_environment("mitogen")), REPO)
        elif name.startswith("at-"):
            root = content_at(name[3:], workdir)
            env = dict(
                base,
                ANSIBLE_CONFIG=str(root / "ansible.cfg"),
                ANSIBLE_CACHE_PLUGIN_CONNECTION=str(facts),
            )
            if not (root / ACCEL / "plugins/strategy/linear.py").is_file():
                # Content from before the accelerator collection, which ansible.cfg names: the
                # stock strategy.
                env["ANSIBLE_STRATEGY"] = "ansible.builtin.linear"
            made = Config(name, env, root)
        else:
            raise SystemExit(
                f"--configs: unknown {name!r} (allowed: {', '.join(KNOWN_CONFIGS)}, at-REF)"
            )
        env = dict(made.env, **{k: v for k, v in extra.items() if k.isupper()})
        # The measuring callback comes on top of the configuration's own callbacks (an
        # ANSIBLE_CALLBACKS_ENABLED of the spec replaces those, as it would the file's).
        own = extra.get("ANSIBLE_CALLBACKS_ENABLED")
        if own is None:
            own = callbacks_enabled_in(Path(env["ANSIBLE_CONFIG"]))
        names_on = [n.strip() for n in own.split(",") if n.strip()]
        env["ANSIBLE_CALLBACKS_ENABLED"] = ",".join([*names_on, "kubegpu_bench"])
        ini = {k: v for k, v in extra.items() if not k.isupper()}
        if ini:
            # Settings without an environment variable (internal_poll_interval): a copy of the
            # configuration file with them set in [defaults].
            env["ANSIBLE_CONFIG"] = str(cfg_with(Path(env["ANSIBLE_CONFIG"]), ini, workdir, spec))
        configs[spec] = Config(spec, env, made.root)
    return configs


ACCEL = "collections/ansible_collections/kubegpu/accel"


def callbacks_enabled_in(cfg: Path) -> str:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(cfg)
    return parser.get("defaults", "callbacks_enabled", fallback="")


def cfg_with(source: Path, settings: dict[str, str], workdir: Path, spec: str) -> Path:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(source)
    for key in ("inventory", "roles_path", "collections_path"):
        if parser.has_option("defaults", key):
            parts = parser.get("defaults", key).split(":")
            parser.set("defaults", key, ":".join(str(source.parent / part) for part in parts))
    for key, value in settings.items():
        parser.set("defaults", key, value)
    target = workdir / ("cfg-" + "".join(c if c.isalnum() else "_" for c in spec) + ".cfg")
    with target.open("w") as handle:
        parser.write(handle)
    return target


def content_at(ref: str, workdir: Path) -> Path:
    """The content (roles, modules, playbooks, collection links) of git revision ref, with the
    working tree's ansible.cfg, so that only the content differs."""
    root = workdir / f"at-{ref.replace('/', '_')}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    archive = subprocess.run(
        ["git", "archive", ref, "roles", "plugins", "playbooks", "collections", "inventories"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    # The working tree's ansible.cfg, less the collection's callbacks that the content at ref
    # does not have yet (ansible-core would skip them with a warning).
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(REPO / "ansible.cfg")
    enabled = [
        n.strip() for n in parser.get("defaults", "callbacks_enabled", fallback="").split(",")
    ]
    kept = [
        n
        for n in enabled
        if n
        and (
            not n.startswith("kubegpu.")
            or (root / ACCEL / "plugins/callback" / f"{n.rpartition('.')[2]}.py").is_file()
        )
    ]
    parser.set("defaults", "callbacks_enabled", ", ".join(kept))
    with (root / "ansible.cfg").open("w") as handle:
        parser.write(handle)
    return root


# --- the bench -----------------------------------------------------------------------------------


def playbook_argv(state: TestbedState, root: Path, limit: str) -> list[str]:
    return [
        str(BIN / "ansible-playbook"),
        "-i",
        str(state.inventory),
        "-i",
        str(root / "inventories/testbed"),
        "--limit",
        limit,
        str(root / PLAYBOOK),
    ]


def adhoc_argv(
    state: TestbedState, pattern: str, module: str, args: dict[str, Any] | None = None
) -> list[str]:
    """`ansible PATTERN -m MODULE [-a JSON]` on the testbed's inventory and the testbed group vars."""
    argv = [
        str(BIN / "ansible"),
        "-i",
        str(state.inventory),
        "-i",
        str(REPO / "inventories/testbed"),
        pattern,
        "-m",
        module,
    ]
    return [*argv, "-a", json.dumps(args)] if args else argv


def ping_argv(state: TestbedState, limit: str) -> list[str]:
    return adhoc_argv(state, limit, "ansible.builtin.ping")


def check_run(run: Run, must_be_unchanged: bool, problems: list[str]) -> None:
    bad = run.rc != 0 or run.failed or run.unreachable or (must_be_unchanged and run.changed)
    if bad:
        text = (
            f"{run.label} on {run.nodes} node(s): rc={run.rc} changed={run.changed} "
            f"failed={run.failed} unreachable={run.unreachable} (log: {run.log})"
        )
        problems.append(text)
        say("!" * 20 + " NOT A CLEAN RUN: " + text)
        for task in run.tasks:
            hosts = [h for h, s in task["hosts"].items() if s in ("changed", "failed")]
            if hosts and (must_be_unchanged or "failed" in task["hosts"].values()):
                say(f"    {task['name']}: {hosts}")


def fmt_table(rows: list[Run]) -> str:
    width = max([16, *(len(r.label) for r in rows)])
    head = (
        f"{'N':>3} {'run':<{width}} {'wall s':>7} {'host-tasks':>10} {'(remote)':>8} {'execs':>5} "
        f"{'skipped':>7} "
        f"{'ctl CPU s':>9} {'ms/ht':>6} {'node CPU s':>10} {'ms/ht':>6} {'total ms/ht':>11} "
        f"{'CPU s/host':>10} {'peak PSS MB (max proc)':>22} {'plain/x':>7}"
    )
    lines = [head, "-" * len(head)]
    plain = {r.nodes: r.wall for r in rows if r.config == "plain" and r.label == "no-change plain"}
    for r in rows:
        per = max(r.host_tasks, 1)
        ratio = f"{plain[r.nodes] / r.wall:6.2f}x" if r.nodes in plain and r.wall else ""
        lines.append(
            f"{r.nodes:>3} {r.label:<{width}} {r.wall:7.1f} {r.host_tasks:>10} {r.remote:>8} "
            f"{r.execs:>5} {r.skipped:>7} {r.ctl_cpu:9.1f} {r.ctl_cpu / per * 1000:6.0f} {r.node_cpu:10.1f} "
            f"{r.node_cpu / per * 1000:6.0f} {(r.ctl_cpu + r.node_cpu) / per * 1000:11.0f} "
            f"{(r.ctl_cpu + r.node_cpu) / max(r.nodes, 1):10.1f} "
            f"{r.peak_pss_mb:>12.0f} ({r.maxrss_mb:5.0f})     {ratio:>7}"
        )
    return "\n".join(lines)


def profile(run: Run, top: int) -> str:
    timed = sorted(run.tasks, key=lambda t: t["end"] - t["start"], reverse=True)[:top]
    lines = [f"slowest tasks of '{run.label}' on {run.nodes} node(s), wall per task (all hosts):"]
    for task in timed:
        statuses = list(task["hosts"].values())
        ran = sum(s != "skipped" for s in statuses)
        lines.append(
            f"  {task['end'] - task['start']:6.2f} s  {task['name'][:70]:<70} "
            f"{task['action'].rpartition('.')[2]:<22} ran {ran}/{len(statuses)}"
        )
    total = sum(t["end"] - t["start"] for t in run.tasks)
    lines.append(f"  ({len(run.tasks)} tasks, {total:.1f} s between the first and last task)")
    # The main process is the one serial part of a run: what it spends per task bounds the wall
    # time however many workers there are.
    costly = sorted(run.tasks, key=lambda t: t.get("main_cpu", 0.0), reverse=True)[:top]
    lines.append("most CPU of the main ansible process per task (all hosts; workers not counted):")
    for task in costly:
        lines.append(
            f"  {task.get('main_cpu', 0.0):6.2f} s  {task['name'][:70]:<70} "
            f"{task['action'].rpartition('.')[2]}"
        )
    main = sum(t.get("main_cpu", 0.0) for t in run.tasks)
    lines.append(
        f"  ({main:.1f} s of main-process CPU in all, of {run.ctl_cpu:.1f} s on the controller)"
    )
    return "\n".join(lines)


@contextlib.contextmanager
def testbed(
    args: argparse.Namespace, size: int, config: TestbedConfig | None = None
) -> Iterator[TestbedState]:
    """The testbed of args (prefix, bridge, subnet, state dir, --reuse, --keep-up), up for the
    block and taken down after it. config: another bench's own (default: size nodes, all in
    containers mode)."""
    if config is None:
        config = TestbedConfig(
            nodes=size,
            name_prefix=args.prefix,
            subnet=args.subnet,
            bridge=args.bridge,
            state_dir=args.state_dir,
            # The node plays wire containerd, which the testbed installs only where it can run.
            containers=tuple(f"{args.prefix}{i}" for i in range(1, size + 1)),
        )
    state = load_state(args.state_dir) if args.reuse else None
    # "up" as its state says: in a container controller (scripts/leg-ansible-latest --run) the
    # nodes' processes are not visible, so they are not asked for.
    if state is not None and state.phase == "up" and len(state.nodes) >= size:
        say(f"reusing the testbed in {args.state_dir} ({len(state.nodes)} nodes)")
        yield state
        return
    say(f"bringing up {size} node(s) in {args.state_dir} (bridge {args.bridge}, {args.subnet})")
    started = time.monotonic()
    try:
        state = up(config, progress=lambda m: say(f"testbed: {m}"))
        say(f"testbed up in {time.monotonic() - started:.0f} s")
        yield state
    finally:
        if args.keep_up:
            say(
                f"leaving the testbed up (--keep-up): kubegpu testbed down --state-dir {args.state_dir}"
            )
        else:
            say("taking the testbed down")
            report = down(args.state_dir)
            if report.remaining:
                say(f"down left: {report.remaining}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--measure-child"]:
        split = argv.index("--")
        return measure_child(Path(argv[1]), Path(argv[2]), argv[split + 1 :])
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join((__doc__ or "").splitlines()[2:]),
    )
    parser.add_argument("--nodes", default="1,4,8,16", help="comma-separated node counts")
    parser.add_argument("--quick", action="store_true", help="a 1-node smoke: --nodes 1")
    parser.add_argument(
        "--configs",
        default=None,
        help="comma-separated from plain, cache, ours, mitogen, at-REF "
        "(default: plain,cache,ours and mitogen when it is installed)",
    )
    parser.add_argument("--profile-config", default="ours")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    parser.add_argument("--prefix", default="bn")
    parser.add_argument("--bridge", default="kgtb3")
    parser.add_argument("--subnet", default="10.213.3.0/24")
    parser.add_argument("--state-dir", type=Path, default=Path("/run/kubegpu-testbed-bn"))
    parser.add_argument("--keep-up", action="store_true", help="leave the testbed up")
    parser.add_argument(
        "--cgroup-root",
        type=Path,
        default=CGROUP_ROOT,
        help="where the host's /sys/fs/cgroup is seen (in a container controller)",
    )
    parser.add_argument("--reuse", action="store_true", help="use an up testbed as it is")
    parser.add_argument("--workdir", type=Path, help="logs and per-run files (default: a temp dir)")
    args = parser.parse_args(argv)
    global cgroup_seen
    cgroup_seen = args.cgroup_root
    counts = [1] if args.quick else sorted({int(n) for n in args.nodes.split(",") if n})
    if not counts or counts[0] < 1:
        parser.error("--nodes: give positive node counts, e.g. 1,4,8,16")
    if args.configs is None:
        try:
            strategy_environment("mitogen")
            names = ["plain", "cache", "ours", "mitogen"]
        except ValueError:
            names = ["plain", "cache", "ours"]
    else:
        names = [n for n in args.configs.split(",") if n]
    if os.geteuid() != 0:
        print("bench_node_plays: needs root (it brings up a testbed)", file=sys.stderr)
        return 4

    def interrupted(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kubegpu-bench-nodes-"))
    workdir.mkdir(parents=True, exist_ok=True)
    say(f"logs in {workdir}")
    facts = workdir / "facts"
    configs = make_configs(names, workdir, facts)
    problems: list[str] = []
    rows: list[Run] = []
    converge: list[Run] = []
    report: dict[str, Any] = {
        "host": {
            "cpus": os.cpu_count(),
            "cpu_model": cpu_model(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "ansible_core": ansible_core_version(),
            "loadavg_start": os.getloadavg(),
        },
        "configs": names,
        "nodes": counts,
    }
    started = time.monotonic()
    try:
        with testbed(args, counts[-1]) as state:
            # In node order (bn2 before bn10), so "the first N nodes" reads naturally.
            names_all = sorted(state.node_names, key=lambda n: int(n[len(args.prefix) :]))
            ours = configs.get("ours") or make_configs(["ours"], workdir, facts)["ours"]
            # 1. first converge: 1 fresh node, then 3 more (4 in all), then the rest 4 at a
            # time: 12 nodes' apt at once through the testbed's apt-cacher-ng hung it (its
            # log: "Failure to move file ... out of the way" on the same InRelease), 4 do not.
            rest = names_all[4 : counts[-1]]
            steps = [names_all[:1], names_all[1:4]] + [
                rest[i : i + 4] for i in range(0, len(rest), 4)
            ]
            for step in steps:
                if not step:
                    continue
                label = f"converge +{len(step)}"
                say(f"{label}: {','.join(step)}")
                run = measure(
                    label,
                    "ours",
                    playbook_argv(state, REPO, ",".join(step)),
                    ours.env,
                    state,
                    step,
                    workdir,
                )
                say(f"  {run.wall:.1f} s, changed {run.changed}, failed {run.failed}")
                check_run(run, False, problems)
                converge.append(run)
            if problems:
                raise RuntimeError("the converge failed; see above")
            # 2. the no-change runs, side by side, for each N.
            for count in counts:
                chosen = names_all[:count]
                limit = ",".join(chosen)
                for floor in ("plain", "ours"):
                    env = (configs.get(floor) or make_configs([floor], workdir, facts)[floor]).env
                    say(f"N={count}: floor (ansible -m ping) under {floor}")
                    run = measure(
                        f"ping {floor}",
                        "floor",
                        ping_argv(state, limit),
                        env,
                        state,
                        chosen,
                        workdir,
                    )
                    check_run(run, False, problems)
                    rows.append(run)
                for name, config in configs.items():
                    say(f"N={count}: no-change run under {name}")
                    run = measure(
                        f"no-change {name}",
                        name,
                        playbook_argv(state, config.root, limit),
                        dict(config.env, KUBEGPU_BENCH_CWD=str(config.root)),
                        state,
                        chosen,
                        workdir,
                    )
                    say(
                        f"  {run.wall:.1f} s, {run.host_tasks} host-tasks, changed {run.changed}, "
                        f"failed {run.failed}, ctl {run.ctl_cpu:.1f} s, node {run.node_cpu:.1f} s"
                    )
                    check_run(run, True, problems)
                    rows.append(run)
    except KeyboardInterrupt:
        say("interrupted: the testbed was taken down (unless --keep-up); figures so far follow")
        problems.append("interrupted")
    except RuntimeError as exc:
        problems.append(str(exc))
    finally:
        report["loadavg_end"] = os.getloadavg()
        report["seconds"] = time.monotonic() - started

    print(
        f"kubegpu node plays (playbooks/nodes.yml) on testbed nodes, ansible-core "
        f"{report['host']['ansible_core']} on Python {report['host']['python']}; "
        f"{os.cpu_count()} CPUs "
        f"({report['host']['cpu_model']}), "
        f"load average at start {report['host']['loadavg_start'][0]:.2f}, "
        f"at end {report['loadavg_end'][0]:.2f}; bench took {report['seconds'] / 60:.1f} min"
    )
    print("\nfirst converge (fresh nodes, packages through the testbed's apt proxy):")
    for run in converge:
        print(
            f"  {run.label:<12} {run.wall:7.1f} s  changed {run.changed:4d}  host-tasks "
            f"{run.host_tasks}  ctl CPU {run.ctl_cpu:.1f} s  node CPU {run.node_cpu:.1f} s"
        )
    print("\nno-change runs (changed=0 and failed=0 required):")
    print(fmt_table(rows))
    target = [r for r in rows if r.config == args.profile_config]
    if target:
        print()
        print(profile(target[-1], args.top))
    if args.json:
        report["converge"] = [asdict(r) for r in converge]
        report["rows"] = [asdict(r) for r in rows]
        args.json.write_text(json.dumps(report, indent=1))
        say(f"figures written to {args.json}")
    if problems:
        print("\nNOT CLEAN (a no-change run changed or failed something):")
        for text in problems:
            print(f"  {text}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
