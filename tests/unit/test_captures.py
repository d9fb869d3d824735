"""The real captures in src/kubegpu/captures: unchanged since they were copied (SHA256SUMS), each
with its source (SOURCES.md), and found by the package itself."""

from __future__ import annotations

import hashlib
from pathlib import Path

from kubegpu import simulate


def files(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and p.name not in ("SOURCES.md", "SHA256SUMS")
    )


def test_every_capture_matches_its_checksum(fixtures_real: Path) -> None:
    sums = {}
    for line in (fixtures_real / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split("  ", 1)
        sums[name] = digest
    assert sorted(sums) == files(fixtures_real)
    for name, digest in sums.items():
        assert hashlib.sha256((fixtures_real / name).read_bytes()).hexdigest() == digest, name


def test_every_capture_has_a_source_row(fixtures_real: Path) -> None:
    rows = {}
    for line in (fixtures_real / "SOURCES.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 4 and "/" in cells[0]:
            rows[cells[0]] = cells[1]
    assert sorted(rows) == files(fixtures_real)
    assert all(source for source in rows.values())


def test_the_package_finds_its_own_captures(fixtures_real: Path) -> None:
    assert simulate.find_fixtures() == fixtures_real.resolve()
    assert "telegraf-tesla-t4-515" in simulate.list_captures()
    assert simulate.resolve_capture("no-driver").rc == 9
