# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Ship compiled bytecode next to the module_utils sources in each AnsiballZ payload, so that a
node whose Python matches the controller's does not compile them again for every module run."""

from __future__ import annotations

DOCUMENTATION = r"""
name: ansiballz_bytecode
type: aggregate
short_description: Compiled module_utils in the AnsiballZ payload, so nodes skip compiling them
description:
  - An AnsiballZ payload is a zip of the module and the module_utils it imports, sources only.
    Python imports them from the zip with zipimport, which never writes bytecode, so every
    module run on a node compiles C(ansible.module_utils.basic) and the rest again (about 60 ms
    of CPU per module run on the testbed's Debian 12 nodes, a third of what a module run
    costs there).
  - This callback adds next to each module_utils source in the payload (and each package
    C(__init__.py)) the bytecode the controller's Python compiles from it, as an unchecked
    hash-based C(.pyc) (PEP 552), which zipimport prefers to the source. The module itself
    stays source only, so its frames keep the file name ansible-core gives them.
  - A node whose Python has another bytecode version (magic number) than the controller's
    ignores the C(.pyc) files and compiles the sources as before; the payload is only larger.
  - The code objects are kept in a per-user folder keyed by a SHA-256 of the file's name and
    source, so later runs do not compile them again on the controller either.
  - The bytecode's file names are the paths inside the payload under C(/<AnsiballZ payload>/)
    (for example C(/<AnsiballZ payload>/ansible/module_utils/basic.py)), where zipimport would
    name the temporary zip on the node; tracebacks from these files say so (their source lines
    still show). A deprecation that a module_utils file of a collection raises is still
    attributed to that collection; one that ansible-core's own module_utils raise without
    naming who deprecates is attributed to no one instead of to ansible-core.
  - Payloads built while an AnsiballZ extension (a debugger or coverage) is on are left as
    ansible-core builds them.
  - kubegpu's ansible.cfg enables it (C(callbacks_enabled)); bench/bench_node_plays.py
    measures what it saves. Like the rest of kubegpu.accel it does nothing on an ansible-core
    minor it was not tested on, or with C(KUBEGPU_ACCEL=0) (plugin_utils/gate.py).
options:
  cache_dir:
    description:
      - The folder for the compiled code. A sub-folder per Python and ansible-core version
        holds the entries; sub-folders of other versions not used for a week are removed. The
        empty string keeps the code in memory only.
    type: str
    default: ~/.cache/kubegpu/ansiballz-bytecode
    env:
      - name: KUBEGPU_ANSIBALLZ_BYTECODE_CACHE_DIR
    ini:
      - section: callback_ansiballz_bytecode
        key: cache_dir
  max_entries:
    description:
      - When the playbook starts with more entries than this in the folder, the folder is
        emptied and filled again.
    type: int
    default: 5000
    env:
      - name: KUBEGPU_ANSIBALLZ_BYTECODE_CACHE_MAX_ENTRIES
    ini:
      - section: callback_ansiballz_bytecode
        key: max_entries
requirements:
  - enabled in C(callbacks_enabled)
"""

import hashlib
import importlib.util
import marshal
import sys
import types
import typing as t
import zipfile

from ansible.executor import module_common
from ansible.plugins.callback import CallbackBase
from ansible.release import __version__ as ANSIBLE_VERSION
from ansible_collections.kubegpu.accel.plugins.plugin_utils import gate
from ansible_collections.kubegpu.accel.plugins.plugin_utils.code_cache import CodeCache

FORMAT = "2"
# What the bytecode's file names start with: a path (ansible-core finds a collection's name in a
# deprecating frame's file name after a '/'), and one that says what it stands for.
PAYLOAD_PREFIX = "/<AnsiballZ payload>/"
# PEP 552: the flags word of a hash-based .pyc that the importer does not check against the
# source (bit 0: hash-based; bit 1, check_source, clear).
UNCHECKED_HASH_FLAGS = (0b01).to_bytes(4, "little")


def version_tag() -> str:
    """One folder per Python bytecode and ansible-core version."""
    parts = (FORMAT, importlib.util.MAGIC_NUMBER.hex(), sys.version, ANSIBLE_VERSION)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def normalized(source: str | bytes) -> bytes:
    """The bytes zipimport compiles: line endings made '\\n'."""
    data = source.encode("utf-8") if isinstance(source, str) else bytes(source)
    return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")


def compiled(name: str, source: bytes, cache: CodeCache) -> types.CodeType:
    key = hashlib.sha256(name.encode("utf-8") + b"\0" + source).hexdigest()
    code = cache.get(key)
    if code is None:
        # As zipimport compiles a source: not inheriting this module's __future__ flags, and
        # at optimization level 0 (asserts kept), as a node's python3 runs by default.
        code = compile(source, PAYLOAD_PREFIX + name, "exec", dont_inherit=True, optimize=0)
        cache.put(key, code)
    return code


def pyc(code: types.CodeType, source: bytes) -> bytes:
    """An unchecked hash-based .pyc of the code (PEP 552)."""
    return (
        importlib.util.MAGIC_NUMBER
        + UNCHECKED_HASH_FLAGS
        + importlib.util.source_hash(source)
        + marshal.dumps(code)
    )


class _WithBytecode:
    """The payload's ZipFile, to recursive_finder: each .py it writes gets its .pyc too."""

    def __init__(self, zf: zipfile.ZipFile, date_time: t.Any, cache: CodeCache) -> None:
        self._zf = zf
        self._date_time = date_time
        self._cache = cache

    def __getattr__(self, name: str) -> t.Any:
        return getattr(self._zf, name)

    def writestr(self, zinfo_or_arcname: t.Any, data: t.Any, *args: t.Any, **kwargs: t.Any) -> None:
        self._zf.writestr(zinfo_or_arcname, data, *args, **kwargs)
        name = getattr(zinfo_or_arcname, "filename", zinfo_or_arcname)
        if not isinstance(name, str) or not name.endswith(".py"):
            return
        source = normalized(data)
        try:
            code = compiled(name, source, self._cache)
        except (SyntaxError, ValueError):
            return  # the node compiles it and reports the error as it would have
        info = module_common._make_zinfo(name + "c", self._date_time, zf=self._zf)
        self._zf.writestr(info, pyc(code, source))


_installed = False


def install(cache: CodeCache) -> bool:
    """Put the bytecode into the payloads that module_common builds from now on."""
    global _installed
    if _installed or not hasattr(module_common, "_make_zinfo"):
        return False
    original = module_common.recursive_finder

    def recursive_finder(
        name: str,
        module_fqn: str,
        module_data: t.Any,
        zf: zipfile.ZipFile,
        date_time: t.Any,
        extension_manager: t.Any,
    ) -> t.Any:
        if getattr(extension_manager, "extension_names", ()):
            return original(name, module_fqn, module_data, zf, date_time, extension_manager)
        payload = _WithBytecode(zf, date_time, cache)
        return original(name, module_fqn, module_data, payload, date_time, extension_manager)

    module_common.recursive_finder = recursive_finder
    _installed = True
    return True


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "kubegpu.accel.ansiballz_bytecode"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook: t.Any) -> None:
        # In the main process, before any worker forks and builds a payload.
        if _installed or not gate.active():  # installed already: a second playbook
            return
        cache = CodeCache.for_option(self.get_option("cache_dir"), version_tag())
        if install(cache):
            cache.open_folder(self.get_option("max_entries"))
