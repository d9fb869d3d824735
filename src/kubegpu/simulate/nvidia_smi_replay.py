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

A MIG capture (kind "mig": a real `nvidia-smi mig -lgip`, `-lgipp`, `-L` and `--query-gpu` of
one machine) makes a stateful MIG GPU: `-i N -mig 0|1`, `mig -lgip/-lgipp/-lgi/-lci`,
`mig -cgi ... [-C]`, `mig -dci`, `mig -dgi`, `-L`, `--query-gpu=...` and
`--query-compute-apps=...` work, with the MIG state kept in a JSON file
($KUBEGPU_SIMULATED_MIG_STATE, else mig-state.json in the capture set). The profiles, their
placements, the GPU's name, UUID and bus id come from the capture; instance ids, placements
chosen and MIG device UUIDs (uuid5 of the GPU UUID, GI and CI) are the simulation's own. What the
captures do not show (errors such as "no room left") is written to stderr prefixed with the
marker line's name.

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
import re
import sys
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

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
    capture["dir"] = location
    for key, name in (
        ("xml", "query.xml"),
        ("list", "list.txt"),
        ("failure", "failure.txt"),
        ("lgip", "mig-lgip.txt"),
        ("lgipp", "mig-lgipp.txt"),
        ("query_csv", "query-gpu.csv"),
    ):
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
    if isinstance(capture.get("driver_version"), str):
        return str(capture["driver_version"])
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
    if capture["kind"] == "mig":
        return Mig(capture, out.write).run(argv)
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


_PROFILE = re.compile(r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)/(\d+)\s")
_PLACEMENT = re.compile(r"^GPU\s+(\d+)\s+Profile ID\s+(\d+)\s+Placements?\s*:\s*\{([\d,]*)\}:(\d+)")
_GPU_LINE = re.compile(r"^GPU (\d+): (.+) \(UUID: (\S+)\)$")
# NVML's compute instance profile ids by compute slices (1g: 0, 2g: 1, 3g: 2, 4g: 3, 7g: 4)
_CI_PROFILE = {1: 0, 2: 1, 3: 2, 4: 3, 6: 5, 7: 4, 8: 6}
_MIG_ERROR_RC = 255
_FLAGS = {
    "lgipp": ("-lgipp", "--list-gpu-instance-possible-placements"),
    "lgip": ("-lgip", "--list-gpu-instance-profiles"),
    "lgi": ("-lgi", "--list-gpu-instances"),
    "lci": ("-lci", "--list-compute-instances"),
    "cgi": ("-cgi", "--create-gpu-instance"),
    "dci": ("-dci", "--destroy-compute-instance"),
    "dgi": ("-dgi", "--destroy-gpu-instance"),
}


def _text(capture: dict[str, Any], key: str) -> str:
    value = capture.get(key)
    return value.decode("utf-8") if isinstance(value, bytes) else ""


def _value_after(argv: list[str], flags: tuple[str, ...]) -> str | None:
    for flag in flags:
        if flag in argv:
            pos = argv.index(flag)
            return argv[pos + 1] if pos + 1 < len(argv) else ""
        for arg in argv:
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
    return None


def _slices(name: str) -> int:
    match = re.match(r"^(\d+)g\.", name)
    return int(match.group(1)) if match else 1


def _table(border: str, header: list[str], rows: list[str]) -> str:
    lines = [border, *header, "|" + "=" * (len(border) - 2) + "|"]
    for row in rows:
        lines += [row, border]
    return "".join(line + "\n" for line in lines)


class Mig:
    """The stateful MIG GPU of a MIG capture set (see the module's docstring)."""

    def __init__(self, capture: dict[str, Any], write: Callable[[bytes], Any]) -> None:
        self.capture = capture
        self.write = write
        self.gpus: list[dict[str, Any]] = []
        for line in _text(capture, "list").splitlines():
            match = _GPU_LINE.match(line.strip())
            if match:
                self.gpus.append({"name": match.group(2), "uuid": match.group(3), "bus_id": ""})
        csv_rows = [r for r in _text(capture, "query_csv").splitlines()[1:] if r.strip()]
        for number, row in enumerate(csv_rows[: len(self.gpus)]):
            self.gpus[number]["bus_id"] = row.split(",")[0].strip()
        self.lgip_lines = _text(capture, "lgip").splitlines()
        self.profiles: dict[int, dict[str, Any]] = {}
        for line in self.lgip_lines:
            match = _PROFILE.match(line.strip())
            if match:
                self.profiles[int(match.group(3))] = {
                    "name": match.group(2),
                    "total": int(match.group(5)),
                    "starts": [],
                    "size": 1,
                }
        for line in _text(capture, "lgipp").splitlines():
            match = _PLACEMENT.match(line.strip())
            if match and int(match.group(2)) in self.profiles:
                entry = self.profiles[int(match.group(2))]
                entry["starts"] = [int(x) for x in match.group(3).split(",") if x]
                entry["size"] = int(match.group(4))
        self.state_path = os.environ.get("KUBEGPU_SIMULATED_MIG_STATE") or os.path.join(
            str(capture.get("dir") or "."), "mig-state.json"
        )
        self.state: dict[str, Any] = {
            "gpus": {str(i): {"mig": False, "gis": []} for i in range(len(self.gpus))},
            "processes": [],
        }
        if os.path.isfile(self.state_path):
            with open(self.state_path) as handle:
                self.state = json.load(handle)

    def _save(self) -> None:
        tmp = self.state_path + ".tmp"
        with open(tmp, "w") as handle:
            json.dump(self.state, handle, indent=2, sort_keys=True)
            handle.write("\n")
        os.replace(tmp, self.state_path)

    def _gpu(self, index: int) -> dict[str, Any]:
        gpu: dict[str, Any] = self.state["gpus"][str(index)]
        return gpu

    def _gis(self, index: int) -> list[dict[str, Any]]:
        return sorted(self._gpu(index)["gis"], key=lambda g: int(g["gi"]))

    def _emit(self, text: str) -> None:
        self.write(text.encode())

    def _error(self, text: str, rc: int = _MIG_ERROR_RC) -> int:
        _notice(f"(an error the captures do not show; the simulation's own wording) {text}")
        return rc

    def _targets(self, argv: list[str]) -> list[int] | None:
        given = _value_after(argv, ("-i", "--id"))
        if given is None:
            return list(range(len(self.gpus)))
        wanted = [int(x) for x in given.split(",") if x.isdigit()]
        if not wanted or any(w >= len(self.gpus) for w in wanted):
            return None
        return wanted

    def _used(self, index: int) -> set[int]:
        used: set[int] = set()
        for gi in self._gis(index):
            used.update(range(gi["start"], gi["start"] + gi["size"]))
        return used

    def _starts_free(self, index: int, pid: int) -> list[int]:
        """Starts where the profile could go now, taken greedily (for Free/Total)."""
        profile, used, free = self.profiles[pid], self._used(index), []
        for start in profile["starts"]:
            cells = set(range(start, start + profile["size"]))
            if not cells & used:
                used |= cells
                free.append(start)
        return free[: profile["total"]]

    def _profile_id(self, token: str) -> int | None:
        token = token.strip()
        if token.isdigit():
            return int(token) if int(token) in self.profiles else None
        name = token[4:].strip() if token.startswith("MIG ") else token
        return next((p for p, v in self.profiles.items() if v["name"] == name), None)

    def _mig_uuid(self, index: int, gi: int, ci: int) -> str:
        key = f"{self.gpus[index]['uuid']}/{gi}/{ci}"
        return f"MIG-{uuid.uuid5(uuid.NAMESPACE_URL, key)}"

    def run(self, argv: list[str]) -> int:
        targets = self._targets(argv)
        if targets is None:
            return self._error("no such GPU: " + " ".join(argv), 6)
        mode = _value_after(argv, ("-mig", "--multi-instance-gpu"))
        if mode is not None:
            return self._set_mode(targets, mode)
        if argv and argv[0] == "mig":
            return self._mig(argv[1:], targets)
        if argv in (["-L"], ["--list-gpus"]):
            return self._list()
        fields = _value_after(argv, ("--query-gpu",))
        if fields is not None:
            return self._query_gpu(fields, _value_after(argv, ("--format",)) or "", targets)
        apps = _value_after(argv, ("--query-compute-apps",))
        if apps is not None:
            names = [f.strip() for f in apps.split(",")]
            for proc in self.state.get("processes") or []:
                self._emit(", ".join(str(proc.get(n, "[N/A]")) for n in names) + "\n")
            return 0
        return self._error("not replayed for a MIG capture: " + " ".join(argv), 2)

    def _set_mode(self, targets: list[int], mode: str) -> int:
        if mode not in ("0", "1"):
            return self._error(f"-mig takes 0 or 1, got {mode!r}", 2)
        for index in targets:
            bus = self.gpus[index]["bus_id"]
            if mode == "0" and self._gis(index):
                return self._error(f"Unable to disable MIG Mode for GPU {bus}: In use", 1)
            self._gpu(index)["mig"] = mode == "1"
            self._emit(f"{'Enabled' if mode == '1' else 'Disabled'} MIG Mode for GPU {bus}\n")
        self._save()
        self._emit("All done.\n")
        return 0

    def _list(self) -> int:
        for index, gpu in enumerate(self.gpus):
            self._emit(f"GPU {index}: {gpu['name']} (UUID: {gpu['uuid']})\n")
            if not self._gpu(index)["mig"]:
                continue
            order = sorted(self._gis(index), key=lambda g: (-_slices(g["name"]), g["start"]))
            devices = [(gi, ci) for gi in order for ci in gi["cis"]]
            for number, (gi, ci) in enumerate(devices):
                mig_uuid = self._mig_uuid(index, gi["gi"], ci)
                self._emit(f"  MIG {gi['name']:<12} Device {number:2d}: (UUID: {mig_uuid})\n")
        return 0

    def _query_gpu(self, fields: str, fmt: str, targets: list[int]) -> int:
        names = [f.strip() for f in fields.split(",") if f.strip()]
        if "csv" not in fmt:
            return self._error("only --format=csv is replayed", 2)
        lines = [] if "noheader" in fmt else [", ".join(names)]
        for index in targets:
            gpu = self.gpus[index]
            mig = "Enabled" if self._gpu(index)["mig"] else "Disabled"
            values = {
                "index": str(index),
                "name": gpu["name"],
                "uuid": gpu["uuid"],
                "pci.bus_id": gpu["bus_id"],
                "mig.mode.current": mig,
                "mig.mode.pending": mig,
                "driver_version": _driver_version(self.capture),
            }
            missing = [n for n in names if n not in values]
            if missing:
                return self._error(f"field(s) not replayed: {', '.join(missing)}", 2)
            lines.append(", ".join(values[n] for n in names))
        self._emit("".join(line + "\n" for line in lines))
        return 0

    def _mig(self, argv: list[str], targets: list[int]) -> int:
        enabled = [i for i in targets if self._gpu(i)["mig"]]
        if not enabled:
            self._emit("No MIG-enabled devices found.\n")
            return 6
        if any(f in argv for f in _FLAGS["lgipp"]):
            self._emit(_text(self.capture, "lgipp"))
            return 0
        if any(f in argv for f in _FLAGS["lgip"]):
            return self._lgip(enabled)
        if any(f in argv for f in _FLAGS["lgi"]):
            return self._lgi(enabled)
        if any(f in argv for f in _FLAGS["lci"]):
            return self._lci(enabled)
        spec = _value_after(argv, _FLAGS["cgi"])
        if spec is not None:
            with_ci = "-C" in argv or "--default-compute-instance" in argv
            return self._create(enabled, spec, with_ci)
        if any(f in argv for f in _FLAGS["dci"]):
            for index in enabled:
                for gi in self._gis(index):
                    for ci in gi["cis"]:
                        self._emit(
                            f"Successfully destroyed compute instance ID {ci:2d} from GPU "
                            f"{index:2d} GPU instance ID {gi['gi']:2d}\n"
                        )
                    gi["cis"] = []
            self._save()
            return 0
        if any(f in argv for f in _FLAGS["dgi"]):
            for index in enabled:
                busy = [g["gi"] for g in self._gis(index) if g["cis"]]
                if busy:
                    return self._error(
                        f"Unable to destroy GPU instance ID {busy[0]} from GPU {index}: In use "
                        "by another client (destroy its compute instances first)"
                    )
                for gi in self._gis(index):
                    self._emit(
                        f"Successfully destroyed GPU instance ID {gi['gi']:2d} from GPU {index:2d}\n"
                    )
                self._gpu(index)["gis"] = []
            self._save()
            return 0
        return self._error("not replayed: nvidia-smi mig " + " ".join(argv), 2)

    def _lgip(self, enabled: list[int]) -> int:
        """The captured table, with this GPU's index and Free counts from the state."""
        for index in enabled:
            for line in self.lgip_lines:
                match = _PROFILE.match(line.strip())
                if match:
                    pid, total = int(match.group(3)), match.group(5)
                    old = f"{match.group(4)}/{total}"
                    new = f"{len(self._starts_free(index, pid))}/{total}".ljust(len(old))
                    line = re.sub(r"^\|\s*\d+ ", f"| {index:3d} ", line)
                    line = line.replace(f" {old} ", f" {new} ", 1)
                self._emit(line + "\n")
        return 0

    def _lgi(self, enabled: list[int]) -> int:
        rows = [
            f"| {index:3d}  MIG {gi['name']:<12} {gi['profile_id']:4d}     {gi['gi']:4d}"
            f"          {str(gi['start']) + ':' + str(gi['size']):<7} |"
            for index in enabled
            for gi in self._gis(index)
        ]
        if not rows:
            self._emit("No GPU instances found: Not Found\n")
            return 6
        header = [
            "| GPU instances:                                        |",
            "| GPU   Name             Profile  Instance   Placement  |",
            "|                          ID       ID       Start:Size |",
        ]
        self._emit(_table("+" + "-" * 55 + "+", header, rows))
        return 0

    def _lci(self, enabled: list[int]) -> int:
        rows = [
            f"| {index:3d}   {gi['gi']:4d}       MIG {gi['name']:<12} "
            f"{_CI_PROFILE.get(_slices(gi['name']), 0):4d}      {ci:4d}          "
            f"{'0:' + str(_slices(gi['name'])):<7} |"
            for index in enabled
            for gi in self._gis(index)
            for ci in gi["cis"]
        ]
        if not rows:
            self._emit("No compute instances found: Not Found\n")
            return 6
        header = [
            "| Compute instances:                                                 |",
            "| GPU     GPU       Name             Profile   Instance   Placement  |",
            "|       Instance                       ID        ID       Start:Size |",
            "|         ID                                                         |",
        ]
        self._emit(_table("+" + "-" * 68 + "+", header, rows))
        return 0

    def _create(self, enabled: list[int], spec: str, with_ci: bool) -> int:
        tokens = [t for t in spec.split(",") if t.strip()]
        if not tokens:
            return self._error("-cgi needs profile ids or names", 2)
        for index in enabled:
            for token in tokens:
                pid = self._profile_id(token)
                if pid is None:
                    return self._error(
                        f"Unable to create a GPU instance on GPU {index} using profile "
                        f"{token.strip()}: Invalid Argument (not a profile of this GPU)"
                    )
                free = self._starts_free(index, pid)
                if not free:
                    return self._error(
                        f"Unable to create a GPU instance on GPU {index} using profile {pid}: "
                        "Insufficient Resources"
                    )
                taken = {g["gi"] for g in self._gis(index)}
                gi_id = next(n for n in range(1, 64) if n not in taken)
                name = self.profiles[pid]["name"]
                self._gpu(index)["gis"].append(
                    {
                        "gi": gi_id,
                        "profile_id": pid,
                        "name": name,
                        # as on the captured H100: a 3g or 4g at the end, small ones from 0
                        "start": free[-1] if self.profiles[pid]["size"] >= 4 else free[0],
                        "size": self.profiles[pid]["size"],
                        "cis": [0] if with_ci else [],
                    }
                )
                self._save()
                self._emit(
                    f"Successfully created GPU instance ID {gi_id:2d} on GPU {index:2d} using "
                    f"profile MIG {name} (ID {pid:2d})\n"
                )
                if with_ci:
                    ci_profile = _CI_PROFILE.get(_slices(name), 0)
                    self._emit(
                        f"Successfully created compute instance ID  0 on GPU {index:2d} GPU "
                        f"instance ID {gi_id:2d} using profile MIG {name} (ID {ci_profile:2d})\n"
                    )
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
