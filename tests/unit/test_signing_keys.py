"""The repository signing-key check of the container toolkit role (tasks/repo-Debian-key.yml, the
same rule as the driver role's repo-Debian-vendor.yml): the key file must hold exactly one public
key, whose primary fingerprint is the one asked for. A file with a second key would make APT's
signed-by trust that key too.

Real keys made with gpg here, the task file run by ansible-playbook on localhost."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_nvidia_driver_roles import failure_message, run_playbook

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "roles" / "nvidia_container_toolkit" / "tasks" / "repo-Debian-key.yml"


def _gpg(home: Path, *args: str) -> str:
    return subprocess.run(
        ["gpg", "--homedir", str(home), "--batch", *args],
        check=True,
        capture_output=True,
        text=True,
        env=dict(os.environ, LC_ALL="C"),
    ).stdout


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two keys (each with an encryption subkey) and their primary fingerprints."""
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    found = {}
    for name in ("vendor", "other"):
        uid = f"kubegpu test {name} <{name}@test.invalid>"
        _gpg(home, "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never")
        listing = _gpg(home, "--with-colons", "--list-keys", uid)
        found[name] = [
            line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:")
        ]
        subkey = "cv25519"
        _gpg(home, "--passphrase", "", "--quick-add-key", found[name][0], subkey, "encr", "never")
        listing = _gpg(home, "--with-colons", "--list-keys", uid)
        found[name] = [
            line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:")
        ]
    folder = tmp_path_factory.mktemp("keys")
    for files, names in (("vendor.gpg", ["vendor"]), ("both.gpg", ["vendor", "other"])):
        (folder / files).write_bytes(
            subprocess.run(
                ["gpg", "--homedir", str(home), "--batch", "--export"]
                + [found[name][0] for name in names],
                check=True,
                capture_output=True,
            ).stdout
        )
    return {"folder": folder, "fingerprints": found}


def _check(tmp_path: Path, keys: dict[str, Any], source: str, fingerprint: str) -> tuple[int, Any]:
    keyring = tmp_path / "keyring.gpg"
    keyring.write_bytes((keys["folder"] / source).read_bytes())
    play = [
        {
            "name": "Check the signing key",
            "hosts": "all",
            "gather_facts": False,
            "vars": {
                "__nvidia_container_toolkit_keyring": str(keyring),
                "nvidia_container_toolkit_repo_key_fingerprint": fingerprint,
                "__nvidia_container_toolkit_key_fingerprint": fingerprint,
                "nvidia_container_toolkit_repo_key_file": str(keys["folder"] / source),
                "__nvidia_container_toolkit_key_url": "",
                "__nvidia_container_toolkit_key_verified": str(
                    tmp_path / "keys" / "keyring.gpg.verified"
                ),
            },
            "tasks": [{"name": "Verify", "ansible.builtin.include_tasks": str(TASKS)}],
        }
    ]
    rc, report, _ = run_playbook(tmp_path, play, {"h1": {}})
    return rc, report


def test_the_one_key_of_the_fingerprint_passes(tmp_path: Path, keys: dict[str, Any]) -> None:
    rc, report = _check(tmp_path, keys, "vendor.gpg", keys["fingerprints"]["vendor"][0])
    assert rc == 0, failure_message(report, "h1")
    assert (tmp_path / "keyring.gpg").exists()
    # Remembered with the keyring's digest, so that only another keyring or pin checks again.
    digest = hashlib.sha256((tmp_path / "keyring.gpg").read_bytes()).hexdigest()
    fingerprint = keys["fingerprints"]["vendor"][0].upper()
    assert (tmp_path / "keys" / "keyring.gpg.verified").read_text() == f"{digest} {fingerprint}"


@pytest.mark.parametrize(
    ("source", "which", "holds"),
    [
        # The vendor key with another key beside it: refused, though the fingerprint is there.
        ("both.gpg", ("vendor", 0), "holds 2 key(s)"),
        # A subkey's fingerprint names no key that signs the repository.
        ("vendor.gpg", ("vendor", 1), "holds 1 key(s)"),
    ],
)
def test_anything_else_is_refused_and_removed(
    tmp_path: Path, keys: dict[str, Any], source: str, which: tuple[str, int], holds: str
) -> None:
    name, index = which
    rc, report = _check(tmp_path, keys, source, keys["fingerprints"][name][index])
    assert rc != 0
    message = failure_message(report, "h1") or ""
    assert "is not the one key of fingerprint" in message, message
    assert holds in message, message
    assert not (tmp_path / "keyring.gpg").exists()
    assert not (tmp_path / "keys" / "keyring.gpg.verified").exists()
