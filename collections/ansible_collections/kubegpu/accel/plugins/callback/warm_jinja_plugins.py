# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Load the built-in and legacy Jinja filter and test plugins once, in the controller's main
process, before the first worker is forked."""

from __future__ import annotations

DOCUMENTATION = r"""
name: warm_jinja_plugins
type: aggregate
short_description: Load Jinja's filter and test plugins once, before the workers fork
description:
  - ansible-core forks a worker process for every task and host, and loads the built-in and
    legacy Jinja filter and test plugins on their first use, which comes after the fork. So
    every worker that templates a filter or a test loads them all again.
  - This callback loads them in the controller's main process when the playbook starts, so that
    every worker forked after that inherits them. It prints nothing and changes no result.
  - It also shares the lookup of a filter or test by name among Jinja environments. ansible-core
    makes a new environment for most templates (hundreds per task list), and each looked its
    filters and tests up through the plugin loader again (about 0.6 ms each). Only found
    plugins are shared, and the shared table starts over when a play or role adds a plugin
    folder, so a name resolves as it would without it.
  - kubegpu's ansible.cfg enables it (C(callbacks_enabled)); bench/bench_node_plays.py measures
    what it saves. Like the rest of kubegpu.accel it does nothing on an ansible-core minor it
    was not tested on, or with C(KUBEGPU_ACCEL=0) (plugin_utils/gate.py).
requirements:
  - enabled in C(callbacks_enabled)
"""

import typing as t

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader, test_loader
from ansible_collections.kubegpu.accel.plugins.plugin_utils import gate

try:  # ansible-core's templating internals; without them the callback does nothing
    from ansible._internal._templating import _jinja_plugins

    _original_getitem = _jinja_plugins.JinjaPluginIntercept.__getitem__
except (ImportError, AttributeError):  # pragma: no cover - another ansible-core
    _jinja_plugins = None
# (plugin type, how many folders the loader had) -> name -> the wrapped plugin function.
_shared: dict[tuple[str, int], dict[str, t.Callable[..., t.Any]]] = {}


def _shared_getitem(self: t.Any, key: str) -> t.Callable[..., t.Any]:
    # The wrapped function keeps no state of the environment that made it (its wrapper calls a
    # static method), so one made for another environment does the same here.
    found = self._wrapped_funcs.get(key)
    if found is not None:
        return found
    loader = self._plugin_loader
    table = _shared.setdefault((loader.type, len(loader._extra_dirs)), {})
    found = table.get(key)
    if found is None:
        found = _original_getitem(self, key)  # raises for an unknown name: nothing is kept
        table[key] = found
    self._wrapped_funcs[key] = found
    return found


def share_plugin_lookups() -> None:
    """Install the shared lookup (once; a second call changes nothing)."""
    _jinja_plugins.JinjaPluginIntercept.__getitem__ = _shared_getitem  # type: ignore[method-assign]


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "kubegpu.accel.warm_jinja_plugins"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook):
        if _jinja_plugins is None or not gate.active():
            return
        share_plugin_lookups()
        # all() loads every filter and test plugin file of the built-in and configured legacy
        # paths into the loader's cache, the same cache a lookup by name fills on first use.
        for loader in (filter_loader, test_loader):
            for _plugin in loader.all():
                pass
