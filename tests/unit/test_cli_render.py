"""CLI rendering and exit codes, driven by real runs of small playbooks on localhost."""

from __future__ import annotations

import io
import json
from pathlib import Path

from kubegpu import cli, report, runner
from kubegpu.content import find_content
from kubegpu.progress import Progress
from tests.unit.test_api import PLAYBOOKS, local_inventory


def test_plain_progress_prints_a_line_per_host_task_and_exit_code_2_on_failure() -> None:
    stream = io.StringIO()
    result = runner.run_playbook(
        PLAYBOOKS / "fail.yml", local_inventory(), on_event=Progress(stream, live=False)
    )
    lines = stream.getvalue().splitlines()
    assert lines[0] == "PLAY Fail one task on purpose"
    assert "local1: Ignore a failure that is expected -> failed (ignored)" in lines
    assert (
        "local1: Stop here with a clear message -> FAILED: the GPU layer is broken on purpose"
        in lines
    )
    assert "\x1b[" not in stream.getvalue()
    assert cli.exit_code(result) == cli.EXIT_FAILED
    summary = report.summary_table(result)
    assert "FAILED local1: [Stop here with a clear message] the GPU layer is broken" in summary


def test_live_progress_redraws_one_line_per_host(tmp_path: Path) -> None:
    stream = io.StringIO()
    result = runner.run_playbook(
        PLAYBOOKS / "ok.yml",
        local_inventory(marker_path=str(tmp_path / "m")),
        on_event=Progress(stream, live=True),
    )
    out = stream.getvalue()
    assert "\x1b[1F\x1b[J" in out  # the host's line was redrawn in place
    assert out.rstrip().endswith("local1: Publish a report through set_stats -> ok")
    assert cli.exit_code(result) == cli.EXIT_OK
    table = report.readiness_table(result.readiness, verbose=True)
    assert table.splitlines()[0] == "Readiness: local1: ready"
    assert "marker" in table and "PASS" in table
    assert json.loads(report.to_json(result))["readiness"]["local1"]["verdict"] == "ready"


def test_readiness_table_lists_failures_with_remedies_first() -> None:
    readiness = {
        "gpu1": {
            "verdict": "not_ready",
            "checks": [
                {"name": "pci", "layer": "hardware", "status": "pass", "observed": 8},
                {
                    "name": "nvidia_smi",
                    "layer": "driver",
                    "status": "fail",
                    "observed": "driver_not_loaded",
                    "remedy": "load the nvidia module",
                },
            ],
        }
    }
    text = report.readiness_table(readiness, width=60)
    lines = text.splitlines()
    assert lines[0] == "Readiness: gpu1: not_ready"
    assert lines[1].split() == ["HOST", "LAYER", "CHECK", "STATUS"]
    assert lines[3].split() == ["gpu1", "driver", "nvidia_smi", "FAIL"]
    assert "pci" not in text  # passing checks only with verbose
    details = text.split("What failed, and what to do:\n")[1].splitlines()
    assert details == [
        "gpu1 driver nvidia_smi: FAIL",
        "    observed: driver_not_loaded",
        "    remedy:   load the nvidia module",
    ]


def test_a_long_remedy_is_wrapped_whole_at_any_width() -> None:
    remedy = (
        "install the NVIDIA driver of branch 580 (nvidia_driver_branch) and reboot the node, "
        "then check `lsmod | grep nvidia` and `dmesg | grep -i nvrm` for the reason the module "
        "did not load"
    )
    readiness = {
        "node1": {
            "verdict": "not_ready",
            "checks": [
                {
                    "name": "kernel_module_loaded",
                    "layer": "kernel",
                    "status": "fail",
                    "observed": "service state unknown: host_root is /var/lib/kubegpu/simulated",
                    "remedy": remedy,
                }
            ],
        }
    }
    for width in (60, 100, 200):
        text = report.readiness_table(readiness, width=width)
        assert max(len(line) for line in text.splitlines()) <= width
        body = text.split("What failed, and what to do:\n")[1]
        # Every word of the remedy and the observation is there, in order.
        words = " ".join(line.strip() for line in body.splitlines()[1:]).split()
        assert " ".join(words).endswith(remedy)
        assert "host_root is /var/lib/kubegpu/simulated" in " ".join(words)
        assert "…" not in text


def test_a_skipped_layer_says_why_once_in_the_summary() -> None:
    content = find_content()
    for playbook, layer in (("cluster.yml", "cluster"), ("tenants.yml", "tenants")):
        result = runner.run_playbook(content.root / "playbooks" / playbook, local_inventory())
        assert result.ok
        assert result.skipped_layers == {
            layer: "kubegpu_kubeconfig is not set: no cluster to deploy to"
        }
        summary = report.summary_table(result)
        lines = [line for line in summary.splitlines() if line.startswith("SKIPPED")]
        assert lines == [
            f"SKIPPED layer {layer}: kubegpu_kubeconfig is not set: no cluster to deploy to"
        ]


def test_layers_left_out_by_tags_or_without_gpu_nodes_say_why() -> None:
    content = find_content()
    result = runner.run_playbook(
        content.root / "site.yml", local_inventory(), tags=["validate"], skip_tags=["cluster"]
    )
    assert result.ok, result.failed
    assert result.skipped_layers["nodes"] == (
        "the inventory's gpu_nodes group has no hosts: no node layer runs"
    )
    assert result.skipped_layers["cluster"] == "left out by skip_tags (cluster)"
    for layer in ("driver", "cuda", "toolkit", "runtime", "kubelet", "tenants"):
        assert result.skipped_layers[layer] == "not among the tags asked for (validate)"
    assert "validate" not in result.skipped_layers and "preflight" not in result.skipped_layers
    summary = report.summary_table(result, width=200)
    assert "SKIPPED layer driver: not among the tags asked for (validate)" in summary.splitlines()
