"""kubegpu.gpu.warm_jinja_plugins: Jinja's built-in filter and test plugins are loaded in the
controller's main process when the playbook starts, so the per-task workers forked after that
inherit them instead of each loading them again (bench/bench_node_plays.py measures the saving).

Every play the unit tests run through the repository's ansible.cfg loads this callback too.
"""

from __future__ import annotations

import configparser
import importlib.util
import os
from pathlib import Path
from types import ModuleType

from ansible.plugins.loader import filter_loader, init_plugin_loader, test_loader

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "plugins" / "callback" / "warm_jinja_plugins.py"


def _plugin() -> ModuleType:
    spec = importlib.util.spec_from_file_location("warm_jinja_plugins", PLUGIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_playbook_start_fills_the_cache_that_forked_workers_inherit() -> None:
    init_plugin_loader()
    # The loaders' cache of built-in and legacy plugins (ansible-core's own attribute) is what a
    # worker fills on its first filter or test when nothing filled it before the fork.
    caches = [loader._cached_non_collection_wrappers for loader in (filter_loader, test_loader)]
    for cache in caches:
        cache.clear()
    _plugin().CallbackModule().v2_playbook_on_start(None)
    filters, tests = (set(cache) for cache in caches)
    assert {"to_json", "ansible.builtin.regex_replace", "combine"} <= filters
    assert {"match", "ansible.builtin.version", "defined"} <= tests
    # A forked child starts with them.
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report how many filters it has, without loading anything
        os.write(write, str(len(filter_loader._cached_non_collection_wrappers)).encode())
        os._exit(0)
    os.close(write)
    assert int(os.read(read, 64)) == len(filters)
    os.close(read)
    os.waitpid(pid, 0)


def test_the_repository_ansible_cfg_enables_it() -> None:
    config = configparser.ConfigParser(interpolation=None)
    config.read(REPO / "ansible.cfg")
    enabled = [name.strip() for name in config.get("defaults", "callbacks_enabled").split(",")]
    assert "kubegpu.gpu.warm_jinja_plugins" in enabled
    assert _plugin().CallbackModule.CALLBACK_NAME == "kubegpu.gpu.warm_jinja_plugins"
