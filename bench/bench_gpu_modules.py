"""What the GPU facts and readiness modules cost per node, next to a bare nvidia-smi call.

    python bench/bench_gpu_modules.py [--repeat 10] [--capture NAME] [--mode warm,cold]
                                      [--json FILE] [--keep-up] [--reuse]

Needs root: it brings up its own testbed of one node with a SIMULATED GPU (prefix bg, bridge
kgtb4, subnet 10.213.4.0/24, state /run/kubegpu-testbed-bg unless told otherwise) and takes it
down at the end, also on Ctrl-C or a failure (--keep-up leaves it up; --reuse takes an up one as
it is). The node's nvidia-smi is kubegpu's test double: a Python script replaying a real
nvidia-smi capture (--capture, default telegraf-tesla-t4-515). So the bare figures are the cost
of that double, not of a real driver's nvidia-smi, and the ratios say what the modules add on
top of whatever nvidia-smi costs.

Each call is made --repeat times after one untimed warm-up; a row gives mean and min per call:

- bare: `nvidia-smi -q -x` (and `nvidia-smi -L`) in a timing loop on the node, all calls in one
  SSH command, so SSH is not counted: wall from bash's EPOCHREALTIME around each call, node CPU
  from the node's own cgroup (read inside the node) around each call; output to /dev/null.
- ssh: `ssh node nvidia-smi -q -x` over an open SSH master connection: what a person timing it
  from the controller sees.
- ansible: `ansible NODE -m kubegpu.gpu.nvidia_gpu_facts`, `-m kubegpu.gpu.gpu_node_readiness`
  (fail_on=[]: a testbed node has no kernel module and no kubelet, so its verdict is not_ready;
  that is its answer, not an error) and the floor `-m ansible.builtin.ping`, with the
  repository's ansible.cfg and the testbed's inventory, under each --mode:
    warm  over an SSH master that is already open (as every task after the first on a host, or
          every ad-hoc call within ControlPersist): SSH setup not counted;
    cold  a fresh SSH connection per call (as bench_node_plays.py measures): setup counted.
  The calls of the ansible rows take turns (round-robin, each turn starting one row further), so
  a change in the machine's load falls on all of them alike.

What a row says:
- wall: per call; for the ansible rows, the whole `ansible` command from start to exit.
- ctl CPU: user+system CPU of the whole process tree of the command on the controller
  (bench_node_plays.py's measuring wrapper, a child subreaper: RUSAGE_CHILDREN), plus, in warm
  mode, what the open SSH master used meanwhile (from its /proc/PID/stat).
- node CPU: the growth of the node cgroup's CPU usage during the call (cgroup v2 usage_usec,
  or v1 cpuacct.usage), so all the node did, sshd and python included.
- x bare: mean wall and mean total CPU (ctl + node) divided by those of the bare
  `nvidia-smi -q -x`.

Figures are printed, never asserted. Progress goes to stderr, the tables to stdout. Here the node
and the controller share the same CPUs (and, on a shared machine, other work): compare rows of
one run, and mind the load averages printed in the header.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

# bench_node_plays puts the checkout's src/ on sys.path (for kubegpu below) and its measuring
# wrapper runs as `bench_node_plays.py --measure-child`.
from bench_node_plays import (
    REPO,
    adhoc_argv,
    make_configs,
    measure,
    node_cgroup_cpu,
    say,
    testbed,
)
from kubegpu.testbed import TestbedConfig, TestbedState
from kubegpu.testbed.nodes import ssh_argv

DEFAULT_CAPTURE = "telegraf-tesla-t4-515"
MODES = ("warm", "cold")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

# Runs on the node (bash, read from stdin): ITERATIONS COMMAND [ARG...]. One untimed warm-up
# call, then per call a line "call RC WALL_US CPU_NS". Only builtins around the call, so the
# loop itself starts no process; the CPU is the node's whole cgroup (all the node did).
NODE_LOOP = r"""
set -u
export LC_ALL=C
n=$1
shift
if [[ -r /sys/fs/cgroup/cpu.stat ]]; then src=/sys/fs/cgroup/cpu.stat
elif [[ -r /sys/fs/cgroup/cpuacct/cpuacct.usage ]]; then src=/sys/fs/cgroup/cpuacct/cpuacct.usage
elif [[ -r /sys/fs/cgroup/cpu,cpuacct/cpuacct.usage ]]; then src=/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage
elif [[ -r /sys/fs/cgroup/unified/cpu.stat ]]; then src=/sys/fs/cgroup/unified/cpu.stat
else echo "no cgroup CPU accounting readable in the node" >&2; exit 3
fi
cpu() {
    local key value
    if [[ $src == *cpuacct.usage ]]; then
        read -r CPU < "$src"
        return
    fi
    while read -r key value; do
        if [[ $key == usage_usec ]]; then CPU=$((value * 1000)); return; fi
    done < "$src"
}
echo "source $src"
"$@" >/dev/null 2>&1
for ((i = 0; i < n; i++)); do
    cpu; c0=$CPU; t0=${EPOCHREALTIME/./}
    if "$@" >/dev/null 2>&1; then rc=0; else rc=$?; fi
    t1=${EPOCHREALTIME/./}; cpu; c1=$CPU
    echo "call $rc $((t1 - t0)) $((c1 - c0))"
done
"""


@dataclass
class Row:
    label: str
    kind: str  # bare, ssh, warm or cold
    command: str
    wall: list[float] = field(default_factory=list)
    ctl_cpu: list[float] = field(default_factory=list)
    node_cpu: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def total_cpu(self) -> list[float]:
        if not self.ctl_cpu:
            return list(self.node_cpu)
        return [c + n for c, n in zip(self.ctl_cpu, self.node_cpu, strict=True)]


def mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def smallest(values: Sequence[float]) -> float:
    return min(values) if values else float("nan")


def process_cpu(pid: int) -> float:
    """User+system CPU seconds of one running process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def node_ssh(state: TestbedState, node: str, *options: str) -> list[str]:
    """The testbed's ssh argv to node, with these options in front (no command yet)."""
    argv = ssh_argv(state.ssh_key, state.known_hosts, state.addresses[node])
    return [argv[0], *options, *argv[1:]]


@contextlib.contextmanager
def ssh_master(state: TestbedState, node: str, path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """An SSH master connection to node on the control socket path, closed after the block."""
    proc = subprocess.Popen(
        node_ssh(state, node, "-N", "-o", "ControlMaster=yes", "-o", f"ControlPath={path}"),
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while not path.is_socket():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the SSH master to {node} did not start (rc {proc.poll()})")
            time.sleep(0.05)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def bare_loop(
    state: TestbedState, node: str, control: Path, label: str, command: list[str], repeat: int
) -> tuple[Row, dict[str, Any]]:
    """command run repeat times in a timing loop on the node, in one SSH command."""
    row = Row(label, "bare", shlex.join(command) + " (timing loop on the node)")
    argv = [
        *node_ssh(state, node, "-o", f"ControlPath={control}"),
        shlex.join(["bash", "-s", "--", str(repeat), *command]),
    ]
    node0 = node_cgroup_cpu(state, [node])
    started = time.perf_counter()
    proc = subprocess.run(
        argv, input=NODE_LOOP, capture_output=True, text=True, timeout=600, check=False
    )
    seconds = time.perf_counter() - started
    outside = node_cgroup_cpu(state, [node]) - node0
    source = ""
    for line in proc.stdout.splitlines():
        parts = line.split()
        if parts[:1] == ["source"]:
            source = parts[1]
        elif parts[:1] == ["call"]:
            rc, wall_us, cpu_ns = (int(p) for p in parts[1:4])
            if rc:
                row.problems.append(f"{shlex.join(command)} exited {rc}")
            row.wall.append(wall_us / 1e6)
            row.node_cpu.append(cpu_ns / 1e9)
    if proc.returncode or len(row.wall) != repeat:
        row.problems.append(
            f"the timing loop exited {proc.returncode} after {len(row.wall)} of {repeat} calls: "
            f"{proc.stderr.strip()[-500:]}"
        )
    extra = {
        "cgroup_in_node": source,
        "ssh_wall_s": seconds,
        "node_cpu_host_side_s": outside,
        "calls": repeat + 1,
    }
    return row, extra


def ssh_call(
    state: TestbedState,
    node: str,
    control: Path,
    master: subprocess.Popen[bytes],
    command: list[str],
    row: Row,
) -> None:
    """One command over the open master: wall and CPU on both sides."""
    argv = [*node_ssh(state, node, "-o", f"ControlPath={control}"), shlex.join(command)]
    node0, ctl0, master0 = node_cgroup_cpu(state, [node]), children_cpu(), process_cpu(master.pid)
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, timeout=120, check=False)
    row.wall.append(time.perf_counter() - started)
    row.ctl_cpu.append(children_cpu() - ctl0 + process_cpu(master.pid) - master0)
    row.node_cpu.append(node_cgroup_cpu(state, [node]) - node0)
    if proc.returncode:
        row.problems.append(f"ssh exited {proc.returncode}: {proc.stderr.decode()[-300:]}")


def module_result(argv: list[str], env: dict[str, str], node: str) -> dict[str, Any]:
    """The module's result for node, from one untimed run with the json stdout callback."""
    env = dict(env, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    proc = subprocess.run(
        argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    try:
        result: dict[str, Any] = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"][node]
    except (ValueError, KeyError, IndexError) as exc:
        raise RuntimeError(
            f"{shlex.join(argv)} gave no result for {node} (rc {proc.returncode}, {exc!r}): "
            f"{(proc.stdout + proc.stderr).strip()[-800:]}"
        ) from exc
    if proc.returncode or result.get("failed") or result.get("unreachable"):
        raise RuntimeError(
            f"{shlex.join(argv)} failed (rc {proc.returncode}): {result.get('msg', result)}"
        )
    return result


def summarise_result(module: str, result: dict[str, Any]) -> dict[str, Any]:
    if module.endswith("nvidia_gpu_facts"):
        gpus = result.get("ansible_facts", {}).get("kubegpu_gpus", {})
        return {
            key: gpus.get(key)
            for key in ("available", "simulated", "count", "driver_version", "cuda_version")
        }
    if module.endswith("gpu_node_readiness"):
        failing = [c["name"] for c in result.get("checks", []) if c.get("status") == "fail"]
        return {
            "verdict": result.get("verdict"),
            "summary": result.get("summary"),
            "simulated": result.get("simulated"),
            "failing": failing,
        }
    return {"ping": result.get("ping")}


def node_vars(state: TestbedState, node: str) -> dict[str, Any]:
    """The node's host vars, as the testbed wrote them into its inventory."""
    data = yaml.safe_load(state.inventory.read_text())
    groups = [data["all"]]
    while groups:
        group = groups.pop()
        hosts = group.get("hosts") or {}
        if node in hosts:
            found: dict[str, Any] = hosts[node] or {}
            return found
        groups.extend((group.get("children") or {}).values())
    raise RuntimeError(f"{node} is not in {state.inventory}")


def fmt_ms(value: float) -> str:
    return "-" if value != value else f"{value * 1000:.1f}"  # NaN: no figure


def fmt_table(rows: list[Row], base: Row) -> str:
    width = max(len(r.label) for r in rows)
    head = (
        f"{'call':<{width}}  {'wall ms':>8} {'(min)':>8}  {'ctl CPU ms':>10} {'node CPU ms':>11} "
        f"{'total CPU ms':>12} {'(min)':>8}  {'x bare wall':>11} {'x bare CPU':>10}"
    )
    lines = [head, "-" * len(head)]
    base_wall, base_cpu = mean(base.wall), mean(base.total_cpu)
    for r in rows:
        ctl = mean(r.ctl_cpu) if r.ctl_cpu else float("nan")
        lines.append(
            f"{r.label:<{width}}  {fmt_ms(mean(r.wall)):>8} {fmt_ms(smallest(r.wall)):>8}  "
            f"{fmt_ms(ctl):>10} {fmt_ms(mean(r.node_cpu)):>11} "
            f"{fmt_ms(mean(r.total_cpu)):>12} {fmt_ms(smallest(r.total_cpu)):>8}  "
            f"{mean(r.wall) / base_wall:10.1f}x {mean(r.total_cpu) / base_cpu:9.1f}x"
        )
    return "\n".join(lines)


def above_floor(rows: list[Row]) -> list[str]:
    """What each module costs above `ansible -m ping` in the same mode: mean and min."""

    def delta(values: list[float], floor: list[float]) -> str:
        return f"{fmt_ms(mean(values) - mean(floor)):>7} / {fmt_ms(smallest(values) - smallest(floor)):>6}"

    lines = []
    for mode in MODES:
        floor = next((r for r in rows if r.kind == mode and r.label.startswith("ping")), None)
        if floor is None:
            continue
        for r in rows:
            if r.kind == mode and r is not floor:
                lines.append(
                    f"  {r.label:<24} wall {delta(r.wall, floor.wall)} ms   "
                    f"ctl CPU {delta(r.ctl_cpu, floor.ctl_cpu)} ms   "
                    f"node CPU {delta(r.node_cpu, floor.node_cpu)} ms"
                )
    return lines


def run_bench(
    args: argparse.Namespace, state: TestbedState, workdir: Path, report: dict[str, Any]
) -> list[Row]:
    node = state.node_names[0]
    simulated = node_vars(state, node).get("kubegpu_testbed_simulated_gpu")
    if not simulated:
        raise RuntimeError(f"{node} has no simulated GPU (a --reuse of another testbed?)")
    smi, host_root = simulated["nvidia_smi"], simulated["host_root"]
    report["node"] = {"name": node, "simulated_gpu": simulated}
    modules: list[tuple[str, str, dict[str, Any]]] = [
        ("ping", "ansible.builtin.ping", {}),
        (
            "nvidia_gpu_facts",
            "kubegpu.gpu.nvidia_gpu_facts",
            {"nvidia_smi": smi, "host_root": host_root},
        ),
        (
            "gpu_node_readiness",
            "kubegpu.gpu.gpu_node_readiness",
            {"nvidia_smi": smi, "host_root": host_root, "fail_on": []},
        ),
    ]
    if args.no_ping:
        modules = modules[1:]
    ours = make_configs(["ours"], workdir, workdir / "facts")["ours"].env
    # One node: a fixed control socket, so the warm ansible calls find the bench's master.
    control = workdir / "cm" / node
    control.parent.mkdir(parents=True, exist_ok=True)
    warm_env = dict(ours, ANSIBLE_SSH_CONTROL_PATH=str(control).replace("%", "%%"))
    rows: list[Row] = []
    results: dict[str, Any] = {}
    report["results"] = results
    report["bare_loops"] = {}
    with ssh_master(state, node, control) as master:
        # 1. bare, on the node.
        for label, command in (
            ("nvidia-smi -q -x", [smi, "-q", "-x"]),
            ("nvidia-smi -L", [smi, "-L"]),
        ):
            say(f"bare: {label} x {args.repeat} on {node}")
            row, extra = bare_loop(state, node, control, label, command, args.repeat)
            report["bare_loops"][label] = extra
            rows.append(row)
        # 2. over the open SSH connection, from the controller.
        row = Row("ssh nvidia-smi -q -x", "ssh", f"ssh {node} {smi} -q -x (open master)")
        say(f"{row.label} x {args.repeat}")
        ssh_call(state, node, control, master, [smi, "-q", "-x"], Row("warm-up", "ssh", ""))
        for _ in range(args.repeat):
            ssh_call(state, node, control, master, [smi, "-q", "-x"], row)
        rows.append(row)
        # 3. the modules through ansible: one untimed call each (its result is shown), then
        # the timed calls, taking turns.
        for short, module, module_args in modules:
            say(f"untimed call of {module}")
            result = module_result(adhoc_argv(state, node, module, module_args), warm_env, node)
            results[short] = summarise_result(module, result)
            say(f"  {results[short]}")
        plan = []
        for mode in args.mode:
            env = warm_env if mode == "warm" else ours
            for short, module, module_args in modules:
                argv = adhoc_argv(state, node, module, module_args)
                row = Row(
                    f"{short} {mode}", mode, shlex.join(argv[-4:] if module_args else argv[-3:])
                )
                rows.append(row)
                plan.append((row, argv, env))
        for turn in range(args.repeat):
            say(f"ansible calls, turn {turn + 1} of {args.repeat}")
            # Each turn starts one further along, so no row always follows the same one.
            shift = turn % len(plan)
            for row, argv, env in plan[shift:] + plan[:shift]:
                master0 = process_cpu(master.pid)
                run = measure(row.label, row.kind, argv, env, state, [node], workdir)
                master_cpu = process_cpu(master.pid) - master0 if row.kind == "warm" else 0.0
                row.wall.append(run.wall)
                row.ctl_cpu.append(run.ctl_cpu + master_cpu)
                row.node_cpu.append(run.node_cpu)
                if run.rc or run.failed or run.unreachable:
                    row.problems.append(
                        f"rc {run.rc}, failed {run.failed}, unreachable {run.unreachable} "
                        f"(log {run.log})"
                    )
            if master.poll() is not None:
                raise RuntimeError("the SSH master connection went away during the warm calls")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join((__doc__ or "").splitlines()[2:]),
    )
    parser.add_argument("--repeat", type=int, default=10, help="timed calls per row")
    parser.add_argument("--capture", default=DEFAULT_CAPTURE, help="the real capture replayed")
    parser.add_argument(
        "--mode", default="warm,cold", help="comma-separated ansible modes: warm, cold"
    )
    parser.add_argument("--no-ping", action="store_true", help="leave out the ansible floor")
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    parser.add_argument("--prefix", default="bg")
    parser.add_argument("--bridge", default="kgtb4")
    parser.add_argument("--subnet", default="10.213.4.0/24")
    parser.add_argument("--state-dir", type=Path, default=Path("/run/kubegpu-testbed-bg"))
    parser.add_argument("--keep-up", action="store_true", help="leave the testbed up")
    parser.add_argument("--reuse", action="store_true", help="use an up testbed as it is")
    parser.add_argument("--workdir", type=Path, help="logs and per-run files (default: a temp dir)")
    args = parser.parse_args(argv)
    args.mode = [m for m in args.mode.split(",") if m]
    if args.repeat < 1 or not args.mode or set(args.mode) - set(MODES):
        parser.error(f"--repeat must be 1 or more and --mode from {', '.join(MODES)}")
    if os.geteuid() != 0:
        print("bench_gpu_modules: needs root (it brings up a testbed)", file=sys.stderr)
        return 4

    def interrupted(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kubegpu-bench-gpu-"))
    workdir.mkdir(parents=True, exist_ok=True)
    say(f"logs in {workdir}")
    node = f"{args.prefix}1"
    config = TestbedConfig(
        nodes=1,
        name_prefix=args.prefix,
        subnet=args.subnet,
        bridge=args.bridge,
        state_dir=args.state_dir,
        simulate_gpu=((node, args.capture),),
    )
    report: dict[str, Any] = {
        "host": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "loadavg_start": os.getloadavg(),
        },
        "repeat": args.repeat,
        "capture": args.capture,
        "modes": args.mode,
    }
    rows: list[Row] = []
    problems: list[str] = []
    started = time.monotonic()
    try:
        with testbed(args, 1, config) as state:
            rows = run_bench(args, state, workdir, report)
    except KeyboardInterrupt:
        say("interrupted: the testbed was taken down (unless --keep-up)")
        problems.append("interrupted")
    except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
        problems.append(str(exc))
        say(f"failed: {exc}")
    finally:
        report["loadavg_end"] = os.getloadavg()
        report["seconds"] = time.monotonic() - started

    capture = report.get("node", {}).get("simulated_gpu", {}).get("capture", args.capture)
    load0, load1 = report["host"]["loadavg_start"], report["loadavg_end"]
    print(
        f"kubegpu GPU modules per node, {args.repeat} timed calls per row after one warm-up; "
        f"{os.cpu_count()} CPUs ({platform.machine()}), load average (1/5/15 min) at start "
        f"{load0[0]:.2f}/{load0[1]:.2f}/{load0[2]:.2f}, at end "
        f"{load1[0]:.2f}/{load1[1]:.2f}/{load1[2]:.2f}; bench took {report['seconds']:.0f} s"
    )
    print(
        f"nvidia-smi here is kubegpu's SIMULATED test double (a Python script replaying the real "
        f"capture {capture}):\nthe bare rows are the double's cost, not a real driver's; one "
        f"testbed node (systemd-nspawn) sharing the controller's CPUs."
    )
    base = next((r for r in rows if r.kind == "bare" and r.wall), None)
    if base is not None:
        print()
        print(fmt_table([r for r in rows if r.wall], base))
        print("\nrows: bare = timing loop on the node (no SSH); ssh = over an open SSH master;")
        print("warm = ansible over an open SSH master; cold = ansible with a fresh SSH connection;")
        print("x bare = mean wall and mean total CPU over those of the bare nvidia-smi -q -x.")
        lines = above_floor(rows)
        if lines:
            print(
                "\neach module above the ansible floor (minus `-m ping` in the same mode; "
                "mean / min; the spread of the calls is larger than some of these):"
            )
            print("\n".join(lines))
    results = report.get("results", {})
    if results:
        print("\nwhat the modules answered (untimed call before the timed ones):")
        for short, result in results.items():
            print(f"  {short:<20} {json.dumps(result)}")
    for row in rows:
        problems += [f"{row.label}: {p}" for p in row.problems]
    if args.json:
        report["rows"] = [dict(asdict(r), total_cpu=r.total_cpu) for r in rows]
        args.json.write_text(json.dumps(report, indent=1))
        say(f"figures written to {args.json}")
    if problems:
        print("\nPROBLEMS:")
        for text in problems:
            print(f"  {text}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
