"""kubegpu.gpu.file_sha256: the SHA-256 of a controller file, through a real play on localhost.

The toolkit role compares it with the node's keyring to skip the copy when nothing differs; a
binary (.gpg) keyring must hash like sha256sum does, and a missing file must be named.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.unit.test_nvidia_driver_roles import host_results, run_playbook


def _sha(tmp_path: Path, term: str) -> tuple[int, dict, str]:
    play = [
        {
            "name": "lookup",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Hash",
                    "ansible.builtin.debug": {
                        "msg": "{{ lookup('kubegpu.gpu.file_sha256', term) }}"
                    },
                    "vars": {"term": term},
                }
            ],
        }
    ]
    rc, report, stderr = run_playbook(tmp_path, play, {"h1": {}})
    results = host_results(report, "h1")
    assert len(results) == 1, (results, stderr)
    return rc, results[0][1], stderr


def test_a_binary_keyring_hashes_like_sha256sum(tmp_path: Path) -> None:
    key = tmp_path / "vendor.gpg"
    data = bytes(range(256)) * 300  # not UTF-8, longer than one read
    key.write_bytes(data)
    rc, result, stderr = _sha(tmp_path, str(key))
    assert rc == 0, stderr
    assert result["msg"] == hashlib.sha256(data).hexdigest()


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "key.asc"
    rc, result, _ = _sha(tmp_path, str(missing))
    assert rc != 0 and result.get("failed")
    assert f"{missing} is not a file on the controller" in result["msg"]
