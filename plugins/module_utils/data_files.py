# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The data files in plugins/module_utils/data/: objects, dashboards and scripts that no logic
decides, kept as the files their readers know (Grafana's JSON model, Prometheus rules and RBAC
rules as YAML, training scripts as Python), with the few values that vary as @@name@@ tokens.

Read on the controller only: the tenancy filters, `kubegpu smoke` and the example renderer
import the module_utils that use these files from the collection as it lies on disk (the
checkout, or the installed wheel, which carries plugins/ whole). A module run through AnsiballZ
gets the Python files of module_utils and nothing beside them, so code that a module imports
(cluster_settings.py, cluster_manifests.py, ...) must not read data files.

- read_text(name), read_json(name), read_yaml(name): a file of the data folder.
- fill(data, values): the data with every @@name@@ token replaced.
"""

from __future__ import absolute_import, division, print_function

import io
import json
import os
import re

__metaclass__ = type

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
_TOKEN = re.compile(r"@@([a-z_]+)@@")


def read_text(name):
    path = os.path.join(DATA_DIR, name)
    try:
        with io.open(path, encoding="utf-8") as handle:
            return handle.read()
    except (IOError, OSError) as exc:
        raise RuntimeError(
            "kubegpu data file %s cannot be read (%s): module_utils that read data files run on "
            "the controller from the collection on disk, not inside a module" % (path, exc)
        ) from exc


def read_json(name):
    return json.loads(read_text(name))


def read_yaml(name):
    import yaml  # the controller has PyYAML (ansible-core needs it); modules never get here

    return yaml.safe_load(read_text(name))


def fill(data, values):
    """data (from a data file) with its @@name@@ tokens replaced by values[name].

    A string that is only a token becomes the value as it is (a number stays a number); a token
    inside a longer string is replaced by the value's text. A token without a value is an error.
    """
    if isinstance(data, dict):
        return dict((key, fill(value, values)) for key, value in data.items())
    if isinstance(data, list):
        return [fill(value, values) for value in data]
    if not isinstance(data, str) or "@@" not in data:
        return data
    whole = _TOKEN.match(data)
    if whole and whole.end() == len(data):
        return values[whole.group(1)]
    return _TOKEN.sub(lambda m: str(values[m.group(1)]), data)
