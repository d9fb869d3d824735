"""What the nvidia_gpu_facts module costs next to the nvidia-smi call it wraps.

Runs, against the SIMULATED GPU (a replay of a real capture, see kubegpu.simulate):
  - a bare `nvidia-smi -q -x` (the replay script),
  - the module run directly (python + its args file, as Ansible's local connection runs it),
  - the module through `ansible localhost -m kubegpu.gpu.nvidia_gpu_facts`,
and prints wall and CPU time per call (CPU of the child processes) and the ratios.

    python bench/bench_facts.py [--capture NAME] [--repeat N]

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from kubegpu.simulate import build_simulated_host_root, write_replay  # noqa: E402


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(run: Callable[[], None], repeat: int) -> tuple[float, float]:
    """Mean wall and child-CPU seconds per call, after one warm-up call."""
    run()
    wall0, cpu0 = time.perf_counter(), children_cpu()
    for _ in range(repeat):
        run()
    return (time.perf_counter() - wall0) / repeat, (children_cpu() - cpu0) / repeat


def checked(argv: list[str], **kwargs: object) -> Callable[[], None]:
    def run() -> None:
        subprocess.run(
            argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs
        )  # type: ignore[call-overload]

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", default="netdata-a100-sxm4-40gb-mig-510")
    parser.add_argument("--repeat", type=int, default=10)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kubegpu-bench-") as tmp_name:
        tmp = Path(tmp_name)
        smi = write_replay(tmp / "bin", opts.capture, python=sys.executable)
        root = tmp / "root"
        build_simulated_host_root(root, opts.capture)
        args_file = tmp / "args.json"
        args_file.write_text(
            json.dumps({"ANSIBLE_MODULE_ARGS": {"nvidia_smi": str(smi), "host_root": str(root)}})
        )
        env = dict(os.environ, PYTHONPATH=str(REPO / "collections"))
        module = REPO / "plugins/modules/nvidia_gpu_facts.py"
        ansible_env = dict(
            os.environ,
            ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
            ANSIBLE_CACHE_PLUGIN="memory",
            ANSIBLE_LOCAL_TEMP=str(tmp / "at"),
        )
        adhoc = [
            str(Path(sys.executable).parent / "ansible"),
            "localhost",
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            "-m",
            "kubegpu.gpu.nvidia_gpu_facts",
            "-a",
            json.dumps({"nvidia_smi": str(smi), "host_root": str(root)}),
        ]
        rows = [
            ("nvidia-smi -q -x (replay)", checked([str(smi), "-q", "-x"])),
            (
                "module, run directly",
                checked([sys.executable, str(module), str(args_file)], env=env),
            ),
            ("ansible -m nvidia_gpu_facts", checked(adhoc, cwd=REPO, env=ansible_env)),
        ]
        print(f"capture {opts.capture} (SIMULATED GPU), {opts.repeat} calls each, mean per call")
        base_wall = base_cpu = 0.0
        for label, run in rows:
            repeat = max(2, opts.repeat // 4) if label.startswith("ansible") else opts.repeat
            wall, cpu = measure(run, repeat)
            if not base_wall:
                base_wall, base_cpu = wall, cpu
            print(
                f"  {label:30s} wall {wall * 1000:8.1f} ms  cpu {cpu * 1000:8.1f} ms  "
                f"ratio wall {wall / base_wall:6.1f}x  cpu {cpu / max(base_cpu, 1e-9):6.1f}x"
            )


if __name__ == "__main__":
    main()
