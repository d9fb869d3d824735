# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Plain data from what a filter receives: ansible-core hands filters tagged subclasses of dict,
list and str (and lazy containers that template an item when it is read)."""

from __future__ import annotations

import copy
import typing as t


def plain(value: t.Any) -> t.Any:
    """value as plain dicts, lists and strings, each item read through its container."""
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, str):
        return str(value)
    return copy.deepcopy(value)
