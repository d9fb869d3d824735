# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The data files in plugins/module_utils/data/: objects, dashboards and scripts that no logic
decides, kept as the files their readers know (Kubernetes objects, Prometheus rules and RBAC
rules as YAML, Grafana's JSON model, training scripts as Python), with the few values that vary
as @@name@@ tokens.

The files are read on the controller only: the tenancy filters, `kubegpu smoke` and the
example renderer import the module_utils that use them from the collection as it lies on disk
(the checkout, or the installed wheel, which carries plugins/ whole). A module run through
AnsiballZ gets the Python files of module_utils and nothing beside them, so code that a module
imports (cluster_settings.py, cluster_manifests.py, ...) never calls the read_ functions: its
action plugin reads the files and hands them to the module as data (gpu_manifests'
_object_templates). fill() reads nothing and serves both sides.

- read_text(name), read_json(name), read_yaml(name): a file of the data folder.
- read_templates(folder): every YAML file of a folder, by name without .yaml.
- fill(data, values): the data with its tokens replaced.
"""

from __future__ import absolute_import, division, print_function

import io
import json
import os
import re

__metaclass__ = type

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
_TOKEN = re.compile(r"@@([a-z_]+)@@")
_OPTIONAL = re.compile(r"@@\?([a-z_]+)@@\Z")


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


def read_templates(folder):
    """Every .yaml file of a folder of the data folder, parsed, by its name without .yaml."""
    path = os.path.join(DATA_DIR, folder)
    try:
        names = sorted(n for n in os.listdir(path) if n.endswith(".yaml"))
    except (IOError, OSError) as exc:
        raise RuntimeError("kubegpu data folder %s cannot be read (%s)" % (path, exc)) from exc
    return dict((n[: -len(".yaml")], read_yaml(folder + "/" + n)) for n in names)


def fill(data, values):
    """data (from a data file) with its tokens replaced by values[name]:

    - "@@name@@", a whole string: the value as it is (a number stays a number, a mapping
      stays the same object); inside a longer string or a mapping key: the value's text.
    - key: "@@?name@@": the value, and the key left out where the value is empty or false.
    - "@@?name@@": {mapping} as a key: the mapping's entries in its place where values[name]
      is true, nothing otherwise; in a list, the item {"@@?name@@": [items]}: those items.

    A token without a value is an error.
    """
    if isinstance(data, dict):
        out = {}
        for key, value in data.items():
            when = _OPTIONAL.match(key) if isinstance(key, str) else None
            if when:
                if values[when.group(1)]:
                    out.update(fill(value, values))
                continue
            optional = _OPTIONAL.match(value) if isinstance(value, str) else None
            if optional:
                if values[optional.group(1)]:
                    out[_text(key, values)] = values[optional.group(1)]
                continue
            out[_text(key, values)] = fill(value, values)
        return out
    if isinstance(data, list):
        out = []
        for item in data:
            block = _conditional_items(item)
            if block is None:
                out.append(fill(item, values))
            elif values[block[0]]:
                out.extend(fill(block[1], values))
        return out
    if not isinstance(data, str) or "@@" not in data:
        return data
    whole = _TOKEN.match(data)
    if whole and whole.end() == len(data):
        return values[whole.group(1)]
    return _text(data, values)


def _text(data, values):
    """A string (or a mapping key) with each token replaced by its value's text."""
    if not isinstance(data, str):
        return data
    return _TOKEN.sub(lambda m: str(values[m.group(1)]), data)


def _conditional_items(item):
    """(name, items) for a list item {"@@?name@@": [items]}; None for any other item."""
    if not isinstance(item, dict) or len(item) != 1:
        return None
    key, items = next(iter(item.items()))
    when = _OPTIONAL.match(key) if isinstance(key, str) else None
    return (when.group(1), items) if when else None
