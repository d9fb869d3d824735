# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Keep the Python code that Jinja compiles from each template and expression, in the
controller's memory and on disk, so that forked workers and later runs do not compile it again."""

from __future__ import annotations

DOCUMENTATION = r"""
name: jinja_code_cache
type: aggregate
short_description: Compile each Jinja template and expression once, not once per task and host
description:
  - ansible-core (2.19 to 2.21) compiles every template and expression from its source each time it is
    rendered, in the worker process it forks for each task and host, and keeps no compiled
    copy. Jinja's compile (parse, generate Python source, compile the Python) is most of what
    a worker spends running a task that does not reach the node, and all of it is repeated for
    every host and every run.
  - This callback keeps the Python code object that Jinja's compile returns, keyed by a
    SHA-256 of the source and of every setting that changes the code generated (the template
    overrides, the code generator, the escaping of backslashes, embedded templates, and the
    versions of Python, Jinja and ansible-core). A worker that compiles a new source writes
    the code to a per-user folder (marshal, one file per key, written atomically); the
    controller's main process loads that folder when the playbook starts and before each
    task, so every worker forked after that finds the code in memory.
  - Only what Jinja's compile returns is kept. Rendering, variables, trust checks and error
    handling are ansible-core's own and run as before; a source that does not compile is
    never stored, so its error is raised as before.
  - Nothing is kept while ansible-core's template debugging is on. A cache entry that cannot
    be read is compiled again; a folder that another user owns or that others may write is
    not used.
  - kubegpu's ansible.cfg enables it (C(callbacks_enabled)); bench/bench_node_plays.py
    measures what it saves. Like the rest of kubegpu.accel it does nothing on an ansible-core
    minor it was not tested on, or with C(KUBEGPU_ACCEL=0) (plugin_utils/gate.py).
options:
  cache_dir:
    description:
      - The folder for the compiled code. A sub-folder per Python, Jinja and ansible-core
        version holds the entries; sub-folders of other versions not used for a week are
        removed. The empty string keeps the code in memory only.
    type: str
    default: ~/.cache/kubegpu/jinja-code
    env:
      - name: KUBEGPU_JINJA_CODE_CACHE_DIR
    ini:
      - section: callback_jinja_code_cache
        key: cache_dir
  max_entries:
    description:
      - When the playbook starts with more entries than this in the folder, the folder is
        emptied and filled again.
    type: int
    default: 20000
    env:
      - name: KUBEGPU_JINJA_CODE_CACHE_MAX_ENTRIES
    ini:
      - section: callback_jinja_code_cache
        key: max_entries
requirements:
  - enabled in C(callbacks_enabled)
"""

import contextvars
import hashlib
import importlib.util
import sys
import typing as t

import jinja2
from ansible.plugins.callback import CallbackBase
from ansible.release import __version__ as ANSIBLE_VERSION
from ansible_collections.kubegpu.accel.plugins.plugin_utils import gate
from ansible_collections.kubegpu.accel.plugins.plugin_utils.code_cache import CodeCache
from jinja2.environment import TemplateExpression

try:  # ansible-core's templating internals (2.19 to 2.21); without them the callback does nothing
    from ansible._internal._templating import _jinja_bits, _jinja_common
except ImportError:  # pragma: no cover - other ansible-core lines
    _jinja_bits = None  # type: ignore[assignment]
    _jinja_common = None  # type: ignore[assignment]

FORMAT = "1"


def supported() -> bool:
    """Whether this ansible-core has the templating internals the keys are made of."""
    if _jinja_bits is None or _jinja_common is None:
        return False
    env_class = getattr(_jinja_bits, "AnsibleEnvironment", None)
    return (
        env_class is not None
        and hasattr(_jinja_bits, "_TemplateCompileContext")
        and hasattr(_jinja_bits, "_TEMPLATE_OVERRIDE_FIELD_NAMES")
        and hasattr(env_class, "_debuggable_template_source")
        and hasattr(getattr(_jinja_common, "_TemplateConfig", None), "allow_embedded_templates")
    )


def version_tag() -> str:
    """One folder per Python bytecode, Jinja and ansible-core version."""
    parts = (
        FORMAT,
        importlib.util.MAGIC_NUMBER.hex(),
        sys.version,
        jinja2.__version__,
        ANSIBLE_VERSION,
    )
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def settings_of(env: t.Any) -> str:
    """Every setting of the environment and of the compile in progress that changes the code."""
    compile_ctx = _jinja_bits._TemplateCompileContext.current(optional=True)
    fields = tuple(getattr(env, name) for name in _jinja_bits._TEMPLATE_OVERRIDE_FIELD_NAMES)
    return repr(
        (
            type(env).__module__,
            type(env).__qualname__,
            env.code_generator_class.__module__,
            env.code_generator_class.__qualname__,
            fields,
            env.optimized,
            env.autoescape if isinstance(env.autoescape, bool) else "callable",
            tuple(sorted(env.extensions)),
            env.is_async,
            env.finalize is not None,
            _jinja_common._TemplateConfig.allow_embedded_templates,
            None if compile_ctx is None else compile_ctx.escape_backslashes,
        )
    )


def key_of(env: t.Any, kind: str, source: str) -> str:
    digest = hashlib.sha256()
    for part in (kind, settings_of(env)):
        digest.update(part.encode())
        digest.update(b"\0")
    digest.update(source.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


class Installed(t.NamedTuple):
    cache: CodeCache
    compile: t.Callable[..., t.Any]
    compile_expression: t.Callable[..., t.Any]


_installed: Installed | None = None
_expression_key: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "kubegpu_jinja_expression_key", default=None
)


def install(cache: CodeCache) -> bool:
    """Put the cache in front of AnsibleEnvironment's compile and compile_expression."""
    global _installed
    if _installed is not None or not supported():
        return False
    env_class = _jinja_bits.AnsibleEnvironment
    original_compile = env_class.compile
    original_expression = env_class.compile_expression

    def compile(
        self: t.Any,
        source: t.Any,
        name: str | None = None,
        filename: str | None = None,
        raw: bool = False,
        defer_init: bool = False,
    ) -> t.Any:
        plain = name is None and filename is None and not raw and not defer_init
        if not plain or self._debuggable_template_source:
            return original_compile(self, source, name, filename, raw, defer_init)
        if isinstance(source, str):
            key = key_of(self, "template", source)
            code = cache.get(key)
        else:  # the tree compile_expression parsed from the source it was given
            key = _expression_key.get()
            code = None
            if key is None:
                return original_compile(self, source)
        if code is None:
            code = original_compile(self, source)
            cache.put(key, code)
        return code

    def compile_expression(self: t.Any, source: t.Any, undefined_to_none: bool = True) -> t.Any:
        if self._debuggable_template_source or not isinstance(source, str):
            return original_expression(self, source, undefined_to_none)
        key = key_of(self, "expression", source)
        code = cache.get(key)
        if code is not None:
            template = self.template_class.from_code(self, code, self.make_globals(None), None)
            return TemplateExpression(template, undefined_to_none)
        token = _expression_key.set(key)
        try:
            return original_expression(self, source, undefined_to_none)
        finally:
            _expression_key.reset(token)

    env_class.compile = compile
    env_class.compile_expression = compile_expression
    _installed = Installed(cache, original_compile, original_expression)
    return True


def uninstall() -> None:
    """Put ansible-core's own methods back (the unit tests use it)."""
    global _installed
    if _installed is None:
        return
    env_class = _jinja_bits.AnsibleEnvironment
    env_class.compile = _installed.compile
    env_class.compile_expression = _installed.compile_expression
    _installed = None


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "kubegpu.accel.jinja_code_cache"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args: t.Any, **kwargs: t.Any) -> None:
        super().__init__(*args, **kwargs)
        self.cache: CodeCache | None = None

    def v2_playbook_on_start(self, playbook: t.Any) -> None:
        if _installed is not None:  # a second playbook in the same process
            self.cache = _installed.cache
            return
        if not gate.active():
            return
        cache = CodeCache.for_option(self.get_option("cache_dir"), version_tag())
        if not install(cache):
            return
        cache.open_folder(self.get_option("max_entries"))
        self.cache = cache

    def v2_playbook_on_task_start(self, task: t.Any, is_conditional: bool) -> None:
        # Called in the main process before the task's workers fork: they inherit what the
        # workers of the tasks before wrote.
        if self.cache is not None:
            self.cache.refresh()

    def v2_playbook_on_handler_task_start(self, task: t.Any) -> None:
        # ansible-core sends a handler's start with the task alone (no is_conditional).
        self.v2_playbook_on_task_start(task, False)
