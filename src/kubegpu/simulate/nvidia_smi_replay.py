#!/usr/bin/env python3
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""kubegpu SIMULATED nvidia-smi: a test double that replays real captured nvidia-smi output.

No GPU exists where kubegpu's tests run. This script stands in for nvidia-smi there and
answers with output captured on a real machine (kubegpu/captures), never with invented
values. Every call writes a line naming the simulation to stderr.

It answers:
  -q -x (--query --xml-format)   the captured XML, byte for byte
  -L (--list-gpus)               the captured -L text, or GPU lines derived from the XML
  --version, -h (--help)         what this is and which capture it replays
For a failure capture (for example "no driver") every query prints the captured message and
exits with the exit status nvidia-smi gives for it (9 for "couldn't communicate").

The capture set is a directory (see kubegpu.simulate.write_capture_set) found at, in order:
  $KUBEGPU_SIMULATED_CAPTURE (a capture set directory, or a single nvidia-smi XML file),
  <this script's resolved path>.capture/, <this script's directory>/capture/.
A capture set holds capture.json ({"name", "source", "kind": "xml"|"failure", "rc"}) and
query.xml (+ optional list.txt) or failure.txt.

Standard library only, Python 3.8+, so that it runs on any test node.
"""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET

MARKER = "KUBEGPU-SIMULATED-NVIDIA-SMI"
USAGE_RC = 2  # nvidia-smi's exit status for an invalid argument


def _notice(text: str) -> None:
    sys.stderr.write(f"{MARKER}: {text}\n")


def find_capture() -> str | None:
    env = os.environ.get("KUBEGPU_SIMULATED_CAPTURE")
    if env:
        return env
    here = os.path.realpath(__file__)
    for candidate in (here + ".capture", os.path.join(os.path.dirname(here), "capture")):
        if os.path.isdir(candidate):
            return candidate
    return None


def load_capture(location: str) -> dict[str, object]:
    """The capture set as a dict: name, source, kind, rc, xml, list, failure."""
    capture: dict[str, object] = {
        "name": None,
        "source": location,
        "kind": "xml",
        "rc": 0,
        "xml": None,
        "list": None,
        "failure": None,
    }
    if os.path.isfile(location):
        with open(location, "rb") as handle:
            capture["xml"] = handle.read()
        capture["name"] = os.path.splitext(os.path.basename(location))[0]
        return capture
    with open(os.path.join(location, "capture.json")) as handle:
        capture.update(json.load(handle))
    for key, name in (("xml", "query.xml"), ("list", "list.txt"), ("failure", "failure.txt")):
        path = os.path.join(location, name)
        if os.path.isfile(path):
            with open(path, "rb") as handle:
                capture[key] = handle.read()
    return capture


def derive_list(xml_bytes: bytes) -> tuple[str, int]:
    """`-L` lines from the XML: 'GPU <i>: <name> (UUID: <uuid>)', and how many MIG devices
    the XML holds (their UUIDs and profiles are not in it, so no line is made up for them)."""
    root = ET.fromstring(xml_bytes)
    lines = []
    mig = 0
    for index, gpu in enumerate(root.findall("gpu")):
        name = " ".join((gpu.findtext("product_name") or "").split())
        uuid = " ".join((gpu.findtext("uuid") or "").split())
        lines.append(f"GPU {index}: {name} (UUID: {uuid})")
        mig += len(gpu.findall("mig_devices/mig_device"))
    return "".join(line + "\n" for line in lines), mig


def _driver_version(capture: dict[str, object]) -> str:
    xml_bytes = capture.get("xml")
    if isinstance(xml_bytes, bytes):
        return ET.fromstring(xml_bytes).findtext("driver_version") or "unknown"
    return "unknown (failure capture)"


def describe(capture: dict[str, object]) -> str:
    return "kubegpu simulation (no GPU here) replaying the real capture {} [{}]".format(
        capture.get("name"),
        capture.get("source"),
    )


def main(argv: list[str]) -> int:
    location = find_capture()
    if not location:
        _notice(
            "kubegpu simulation: no capture set found (set KUBEGPU_SIMULATED_CAPTURE or put "
            f"one at {os.path.realpath(__file__)}.capture)"
        )
        return USAGE_RC
    capture = load_capture(location)
    _notice(describe(capture))
    args = set(argv)
    out = sys.stdout.buffer
    if args & {"-h", "--help"}:
        out.write(
            (
                f"{describe(capture)}\n\nThis is not NVIDIA's nvidia-smi. It replays recorded output for: "
                "-q -x, -L, --version.\n"
            ).encode()
        )
        return 0
    if "--version" in args:
        version = _driver_version(capture)
        out.write(
            (
                f"NVIDIA-SMI version  : {version}\nDRIVER version      : {version}\n{MARKER}: {describe(capture)}\n"
            ).encode()
        )
        return 0
    if capture["kind"] == "failure":
        failure = capture.get("failure")
        out.write(failure if isinstance(failure, bytes) else b"")
        rc = capture.get("rc")
        return rc if isinstance(rc, int) else 255
    xml_bytes = capture.get("xml")
    if not isinstance(xml_bytes, bytes):
        _notice("capture set has no query.xml")
        return USAGE_RC
    query = bool(args & {"-q", "--query"})
    xml = bool(args & {"-x", "--xml-format"})
    if query and xml and len(args) == 2:
        out.write(xml_bytes)
        return 0
    if args in ({"-L"}, {"--list-gpus"}):
        listed = capture.get("list")
        if isinstance(listed, bytes):
            out.write(listed)
            return 0
        text, mig = derive_list(xml_bytes)
        if mig:
            _notice(
                f"the capture has no -L text; {mig} MIG device line(s) left out rather than made up"
            )
        out.write(text.encode())
        return 0
    _notice("only -q -x, -L, --version and -h are replayed; got: {}".format(" ".join(argv)))
    return USAGE_RC


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
