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
  - kubegpu's ansible.cfg enables it (C(callbacks_enabled)); bench/bench_node_plays.py measures
    what it saves.
requirements:
  - enabled in C(callbacks_enabled)
"""

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader, test_loader


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "kubegpu.gpu.warm_jinja_plugins"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook):
        # all() loads every filter and test plugin file of the built-in and configured legacy
        # paths into the loader's cache, the same cache a lookup by name fills on first use.
        for loader in (filter_loader, test_loader):
            for _plugin in loader.all():
                pass
