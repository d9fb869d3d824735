"""kubegpu.accel.warm_jinja_plugins: Jinja's built-in filter and test plugins are loaded in the
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
from typing import Any

import pytest
from ansible.errors import AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import filter_loader, init_plugin_loader, test_loader
from ansible.template import Templar, trust_as_template

from tests.accel import TESTED, only_where_it_runs

# The accelerator's own tests: where it runs (tests/accel.py).
pytestmark = only_where_it_runs
if TESTED:  # ansible-core internals, which another minor need not have
    from ansible._internal._templating import _jinja_plugins

REPO = Path(__file__).resolve().parents[2]
PLUGIN = (
    REPO / "collections/ansible_collections/kubegpu/accel/plugins/callback/warm_jinja_plugins.py"
)


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
    assert "kubegpu.accel.warm_jinja_plugins" in enabled
    assert _plugin().CallbackModule.CALLBACK_NAME == "kubegpu.accel.warm_jinja_plugins"


def test_filter_and_test_lookups_are_shared_among_environments(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    init_plugin_loader()
    plugin = _plugin()
    # Installed for this test only: monkeypatch puts ansible-core's own method back.
    monkeypatch.setattr(
        _jinja_plugins.JinjaPluginIntercept,
        "__getitem__",
        _jinja_plugins.JinjaPluginIntercept.__getitem__,
    )
    monkeypatch.setattr(plugin, "_shared", {})
    plugin.share_plugin_lookups()
    looked_up: list[str] = []
    real_get = filter_loader.get

    def counting_get(name: str, *args: Any, **kwargs: Any) -> Any:
        looked_up.append(name)
        return real_get(name, *args, **kwargs)

    monkeypatch.setattr(filter_loader, "get", counting_get)

    def render(template: str) -> Any:
        # A new Templar per call: a new Jinja environment, as ansible-core makes per task.
        templar = Templar(loader=DataLoader(), variables={"x": [3, 1, 2]})
        return templar.template(trust_as_template(template))

    assert render("{{ x | sort | first }}") == 1
    assert sorted(looked_up) == ["first", "sort"]
    assert render("{{ x | sort | last }}") == 3
    assert sorted(looked_up) == ["first", "last", "sort"]  # sort came from the shared table
    # An unknown name is never kept: each environment looks it up and fails the same way.
    for _ in range(2):
        with pytest.raises(AnsibleError, match="kg_shout"):
            render("{{ 'a' | kg_shout }}")
    assert looked_up.count("kg_shout") == 2
    # A plugin folder added later (a role's filter_plugins) starts the shared table over, so
    # a name is found as ansible-core would find it with that folder. (The loader's folder list
    # is put back after the test.)
    (tmp_path / "shout.py").write_text(
        "class FilterModule:\n"
        "    def filters(self):\n"
        "        return {'kg_shout': lambda s: s.upper() + '!'}\n"
    )
    monkeypatch.setattr(filter_loader, "_extra_dirs", list(filter_loader._extra_dirs))
    filter_loader.add_directory(str(tmp_path))
    assert render("{{ 'a' | kg_shout }}") == "A!"
    assert render("{{ x | sort | first }}") == 1
    assert looked_up.count("sort") == 2
