"""CLI rendering and exit codes, driven by real runs of small playbooks on localhost."""

from __future__ import annotations

import io
import json
from pathlib import Path

from kubegpu import cli, report, runner
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
    text = report.readiness_table(readiness)
    lines = text.splitlines()
    assert lines[0] == "Readiness: gpu1: not_ready"
    assert lines[1].split() == [
        "HOST",
        "LAYER",
        "CHECK",
        "STATUS",
        "OBSERVED",
        "REMEDY",
        "/",
        "EXPECTED",
    ]
    assert lines[3].split()[:4] == ["gpu1", "driver", "nvidia_smi", "FAIL"]
    assert lines[3].endswith("load the nvidia module")
    assert "pci" not in text  # passing checks only with verbose
