# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""What the nvidia_container_toolkit role's read of a Debian node shows, decided once in
Python: the APT helpers missing, whether the keyrings folder, the key, the repository's source
and the pin differ from what the role writes, and which toolkit packages are not installed at
the version, not fully installed or without the selection the hold step gives them.

The read (roles/nvidia_container_toolkit/tasks/validate.yml, or install-Debian.yml's own
package query) prints lines that say what they are: "pkg NAME STATUS" (the helpers), "source
PATH" (another APT source listing the repository), "keyring SHA256 MODE USER GROUP", "own
SHA256 MODE USER GROUP" (the role's source), "dir TYPE MODE USER GROUP" (the keyrings folder),
"other PATH" (a keyring of the other format), "pin SHA256 MODE USER GROUP", "verified SHA256
FINGERPRINT" (the keyring last checked against a fingerprint), "refresh-unit" (the toolkit ships
NVIDIA's nvidia-cdi-refresh.path), "refresh-dropin SHA256 MODE USER GROUP" (the role's drop-in
for NVIDIA's refresh service), "refresh-state ENABLED ACTIVE" (systemctl is-enabled and
is-active of the path unit) and, with no prefix, the toolkit packages' rows
NAME|STATUS-ABBREV|VERSION|SELECTION. kubegpu.gpu.read_script returns this plan with the read
(its `plan` option)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import re

from ansible_collections.kubegpu.gpu.plugins.module_utils.deb822 import Deb822Error, deb822_source

_KEYS = (
    "os_family",
    "repo_manage",
    "packages",
    "version",
    "hold",
    "key_fingerprint",
    "key_file_sha256",
    "key_checksum",
    "source",
    "pin_content",
)
_OWNED = ["644", "root", "root"]


class ToolkitPlanError(ValueError):
    """The plan's arguments are not what the role passes."""


def version_regex(version):
    """The package version as a whole-string regex: '*' in it matches anything."""
    return "^" + re.escape(version).replace("\\*", ".*") + "$"


def _sha256(text):
    return hashlib.sha256(str(text).encode("utf-8")).hexdigest()


def _fields(lines, prefix):
    return [line.split(" ") for line in lines if line.startswith(prefix + " ")]


def plan(stdout, args):
    """args: os_family, repo_manage, packages, version, hold, key_fingerprint, key_file_sha256
    (the controller key file's digest, empty when the key comes from a URL), key_checksum
    ("sha256:HEX" or empty), source (the deb822 source's options, as the deb822_source filter
    takes them) and pin_content (the preferences file's text): what the role writes.

    Returns other_sources, helpers_missing, keyring_dir_stale, key_stale, key_unverified (a
    fingerprint is pinned and the keyring there was not checked against it), source_stale,
    pin_in_place, installed, outdated, unsettled, unselected, packages_work (without a
    repository change, which the role adds), install_work and setup_work; and, for NVIDIA's
    CDI refresh units, refresh_units (the toolkit ships them), refresh_dropin_present,
    refresh_work (the role's drop-in differs from refresh_dropin_content, an optional argument,
    or the path unit is not enabled and active) and refresh_settled (units shipped, no
    refresh_work). Packages installed later in the run make the refresh fields stale: the role
    uses them only where setup_work is false."""
    missing_keys = [key for key in _KEYS if key not in args]
    if missing_keys:
        raise ToolkitPlanError("plan_args lacks %s" % ", ".join(missing_keys))
    lines = stdout.splitlines()
    packages = list(args["packages"])
    version = str(args["version"])
    repo_manage = bool(args["repo_manage"])

    helpers_ok = set(f[1] for f in _fields(lines, "pkg") if len(f) > 2 and f[2][1:2] == "i")
    helpers = ["gpg"] if args["key_fingerprint"] else []
    keyring = ([*_fields(lines, "keyring"), ["keyring"]])[0]
    if args["key_file_sha256"]:
        key_stale = keyring[1:] != [args["key_file_sha256"], *_OWNED]
    else:
        checksum = args["key_checksum"] or ""
        key_stale = keyring[2:] != _OWNED or bool(
            checksum and checksum != "sha256:" + (keyring[1] if len(keyring) > 1 else "")
        )

    # A pinned key is checked again whenever the keyring is not the one last checked against
    # this fingerprint (a pin added or changed later, a keyring changed by someone else).
    fingerprint = str(args["key_fingerprint"] or "").replace(" ", "").upper()
    key_unverified = (
        bool(fingerprint)
        and len(keyring) > 1
        and [keyring[1], fingerprint] not in [f[1:] for f in _fields(lines, "verified")]
    )

    rows = [line.split("|") for line in lines if re.match(r"^[^ |]+[|]", line)]
    matches = re.compile(version_regex(version))
    at_version = [row for row in rows if len(row) > 2 and matches.match(row[2])]
    selection = "hold" if args["hold"] else "install"

    def state(row):
        return row[1][1:2] if len(row) > 1 else ""

    installed = []
    for row in rows:
        if len(row) > 1 and state(row) not in ("n", "c", "") and row[0] not in installed:
            installed.append(row[0])
    present = [r[0] for r in at_version if state(r) not in ("n", "c", "")]
    outdated = [p for p in packages if p not in present]
    unsettled = [p for p in packages if p not in [r[0] for r in at_version if state(r) == "i"]]
    unselected = [p for p in packages if p not in [r[0] for r in rows if r[3:4] == [selection]]]
    packages_work = bool(outdated or unsettled or "*" in version or unselected)
    pin_sha256 = _sha256(args["pin_content"])
    try:
        source_sha256 = _sha256(deb822_source(args["source"]))
    except Deb822Error:
        # Settings that make no source: the role's checks name them; nothing matches.
        source_sha256 = None
    pin_in_place = repo_manage and ["pin", pin_sha256, *_OWNED] in [
        line.split(" ") for line in lines
    ]
    result = {
        "other_sources": [line[len("source ") :] for line in lines if line.startswith("source ")],
        "helpers_missing": [h for h in helpers if h not in helpers_ok],
        "keyring_dir_stale": "dir directory 755 root root" not in lines
        or bool(_fields(lines, "other")),
        "key_stale": key_stale,
        "key_unverified": key_unverified,
        "source_stale": source_sha256 is None
        or not any(line.startswith("own %s 644 " % source_sha256) for line in lines),
        "pin_in_place": pin_in_place,
        "installed": installed,
        "outdated": outdated,
        "unsettled": unsettled,
        "unselected": unselected,
        "packages_work": packages_work,
    }
    refresh_units = "refresh-unit" in lines
    dropin = ([*_fields(lines, "refresh-dropin"), ["refresh-dropin"]])[0]
    dropin_content = args.get("refresh_dropin_content")
    refresh_work = refresh_units and (
        dropin_content is None
        or dropin[1:] != [_sha256(dropin_content), *_OWNED]
        or ["refresh-state", "enabled", "active"] not in [line.split(" ") for line in lines]
    )
    result["refresh_units"] = refresh_units
    result["refresh_dropin_present"] = len(dropin) > 1
    result["refresh_work"] = refresh_work
    result["refresh_settled"] = refresh_units and not refresh_work
    result["install_work"] = (
        args["os_family"] != "Debian" or not repo_manage or not pin_in_place or packages_work
    )
    result["setup_work"] = result["install_work"] or (
        repo_manage
        and bool(
            result["helpers_missing"]
            or result["keyring_dir_stale"]
            or result["key_stale"]
            or result["key_unverified"]
            or result["source_stale"]
        )
    )
    return result
