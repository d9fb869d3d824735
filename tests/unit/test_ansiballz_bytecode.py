"""kubegpu.accel.ansiballz_bytecode: the AnsiballZ payloads carry the controller's bytecode for their
module_utils, which a Python of the same bytecode version imports instead of compiling the
sources, and any other Python ignores.

A real playbook builds a real payload (ansible.builtin.ping, on localhost); the payload is then
run by this Python with an audit hook that reports every compile() of a module_utils source.
bench/bench_node_plays.py measures what it saves on the testbed's nodes.
"""

from __future__ import annotations

import importlib.util
import io
import json
import marshal
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import yaml

from tests.accel import only_where_it_runs

# The accelerator's own tests: where it runs (tests/accel.py).
pytestmark = only_where_it_runs

REPO = Path(__file__).resolve().parents[2]

# Runs a payload (argv[1]) as the node's Python would, printing to stderr each module_utils
# source it compiles (the audit event "compile" carries the file name).
RUN_WITH_HOOK = """\
import runpy, sys
def hook(event, args):
    if event == "compile" and len(args) > 1 and str(args[1]).endswith(".py") and "module_utils" in str(args[1]):
        print("COMPILED " + str(args[1]), file=sys.stderr)
sys.addaudithook(hook)
path = sys.argv.pop(1)
runpy.run_path(path, run_name="__main__")
"""


def payload(tmp: Path, callbacks: str) -> Path:
    """The AnsiballZ file a playbook leaves on 'the node' (localhost) for ping."""
    inventory = {
        "all": {
            "hosts": {"node": None},
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        }
    }
    (tmp / "inventory.yml").write_text(yaml.safe_dump(inventory))
    play = [
        {
            "hosts": "all",
            "gather_facts": False,
            "tasks": [{"ansible.builtin.ping": {"data": "from the payload"}}],
        }
    ]
    (tmp / "play.yml").write_text(yaml.safe_dump(play))
    remote = tmp / "remote"
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_CALLBACKS_ENABLED=callbacks,
        ANSIBLE_KEEP_REMOTE_FILES="1",
        ANSIBLE_PIPELINING="0",
        ANSIBLE_REMOTE_TMP=str(remote),
        ANSIBLE_LOCAL_TEMP=str(tmp / "local"),
        KUBEGPU_ANSIBALLZ_BYTECODE_CACHE_DIR=str(tmp / "cache"),
        KUBEGPU_JINJA_CODE_CACHE_DIR="",
    )
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            "-i",
            "inventory.yml",
            "play.yml",
        ],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (found,) = remote.glob("*/AnsiballZ_ping.py")
    return found


def run(path: Path) -> tuple[dict[str, Any], list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", RUN_WITH_HOOK, str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    compiled = [line for line in done.stderr.splitlines() if line.startswith("COMPILED ")]
    return json.loads(done.stdout), compiled


def exploded(path: Path) -> set[str]:
    """The payload's file names, from the wrapper's own explode command."""
    subprocess.run([sys.executable, str(path), "explode"], cwd=path.parent, check=True)
    base = path.parent / "debug_dir"
    return {str(p.relative_to(base)) for p in base.rglob("*") if p.is_file()}


def test_the_payload_s_module_utils_are_imported_from_bytecode(tmp_path: Path) -> None:
    ours = tmp_path / "ours"
    theirs = tmp_path / "theirs"
    for folder in (ours, theirs):
        folder.mkdir()
    with_bytecode = payload(ours, "kubegpu.accel.ansiballz_bytecode")
    without = payload(theirs, "kubegpu.accel.jinja_code_cache")

    result, compiled = run(with_bytecode)
    assert result["ping"] == "from the payload" and not result.get("failed")
    assert compiled == []
    # ansible-core's own payload: the same run compiles every module_utils source it imports.
    result, their_compiled = run(without)
    assert result["ping"] == "from the payload"
    assert any(name.endswith("ansible/module_utils/basic.py") for name in their_compiled)

    names = exploded(with_bytecode)
    sources = {n for n in names if n.endswith(".py")}
    assert "ansible/module_utils/basic.py" in sources
    # Each module_utils source has its bytecode; the module and its package stay source only.
    assert {n for n in names if n.endswith(".pyc")} == {
        n + "c" for n in sources if not n.startswith("ansible/modules/")
    }
    assert not any(n.endswith(".pyc") for n in exploded(without))
    # The code went to the cache folder for the next run.
    assert len(list((ours / "cache").glob("*/*.code"))) == len(sources) - 2


# Builds the module_utils of one import of basic through ansible-core's recursive_finder with
# the plugin installed, in a Python of its own (ansible-core's collection finder, which the build
# needs, would otherwise take over this test process's imports).
BUILD = """\
import datetime, importlib.util, io, json, sys, zipfile
from pathlib import Path
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
from ansible._internal._ansiballz import _builder
from ansible.executor import module_common
from ansible_collections.kubegpu.accel.plugins.callback import ansiballz_bytecode
from ansible_collections.kubegpu.accel.plugins.plugin_utils.code_cache import CodeCache
folder, out, how = sys.argv[2:5]
if how == "other-magic":  # the bytecode version of another Python
    importlib.util.MAGIC_NUMBER = b"\\x00\\x00\\r\\n"
class Coverage:  # all ExtensionManager needs of an extension's options: that they are set
    pass
manager = _builder.ExtensionManager(coverage=Coverage() if how == "coverage" else None)
cache = CodeCache(Path(folder) if folder else None)
cache.open_folder(100)
assert ansiballz_bytecode.install(cache)
buffer = io.BytesIO()
with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
    module_common.recursive_finder(
        "probe", "ansible.modules.probe",
        b"from ansible.module_utils.basic import AnsibleModule\\n",
        zf, datetime.datetime(2026, 1, 1), manager,
    )
Path(out).write_bytes(buffer.getvalue())
print(json.dumps({"hits": cache.hits, "misses": cache.misses, "stored": cache.stored}))
"""


def build(tmp: Path, folder: Path | None, how: str = "") -> tuple[bytes, dict[str, int]]:
    out = tmp / "built.zip"
    done = subprocess.run(
        [sys.executable, "-c", BUILD, str(REPO / "collections"), str(folder or ""), str(out), how],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out.read_bytes(), json.loads(done.stdout.splitlines()[-1])


def names(data: bytes) -> list[str]:
    return zipfile.ZipFile(io.BytesIO(data)).namelist()


def imports_basic(data: bytes, tmp: Path) -> list[str]:
    """Import basic from the zip with zipimport, as a node does; the module_utils compiled."""
    path = tmp / "payload.zip"
    path.write_bytes(data)
    script = (
        RUN_WITH_HOOK.split("path = ")[0]
        + f"sys.path.insert(0, {str(path)!r})\nimport ansible.module_utils.basic\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [line for line in done.stderr.splitlines() if line.startswith("COMPILED ")]


def test_bytecode_is_the_source_s_and_another_python_falls_back_to_the_source(
    tmp_path: Path,
) -> None:
    built, _ = build(tmp_path, tmp_path / "cache")
    zf = zipfile.ZipFile(io.BytesIO(built))
    sources = [n for n in zf.namelist() if n.endswith(".py")]
    assert "ansible/module_utils/basic.py" in sources
    for name in sources:
        data = zf.read(name + "c")
        assert data[:4] == importlib.util.MAGIC_NUMBER
        assert data[4:8] == (1).to_bytes(4, "little")  # hash-based, unchecked
        assert data[8:16] == importlib.util.source_hash(zf.read(name))
        expected = compile(zf.read(name), name, "exec", dont_inherit=True, optimize=0)
        code = marshal.loads(data[16:])
        assert code.co_code == expected.co_code
        assert code.co_filename == "/<AnsiballZ payload>/" + name
    assert imports_basic(built, tmp_path) == []

    # A Python of another bytecode version: its zipimport refuses the .pyc and compiles.
    other, _ = build(tmp_path, tmp_path / "cache", "other-magic")
    assert zipfile.ZipFile(io.BytesIO(other)).read("ansible/module_utils/basic.pyc")[:4] == (
        b"\x00\x00\r\n"
    )
    compiled = imports_basic(other, tmp_path)
    assert any(name.endswith("ansible/module_utils/basic.py") for name in compiled)


def test_later_builds_take_the_code_from_the_folder(tmp_path: Path) -> None:
    built, first = build(tmp_path, tmp_path / "cache")
    assert first["hits"] == 0 and first["stored"] == first["misses"] > 0
    again, later = build(tmp_path, tmp_path / "cache")
    assert later["misses"] == 0 and later["hits"] == first["misses"]
    assert sorted(names(again)) == sorted(names(built))


def test_payloads_with_an_extension_are_left_alone(tmp_path: Path) -> None:
    built, _ = build(tmp_path, None, "coverage")
    assert "ansible/module_utils/basic.py" in names(built)
    assert not any(n.endswith(".pyc") for n in names(built))
