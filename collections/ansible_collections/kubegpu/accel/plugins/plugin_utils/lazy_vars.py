# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""One lazy wrap of a task's variables per task, not one per template render.

Every render of ansible-core's templating (2.19 to 2.21) wraps the variables it was given (a task's
300-odd) into a new lazy dict: each value goes through a Python generator into its own
`_LazyValue` marker (`_flatten_and_lazify_vars` in ansible/_internal/_templating/_jinja_bits.py).
One task's post_validate, conditions and arguments render the same dict several times over, and
that wrapping was about a twelfth of the controller's CPU in a no-change run of the node plays.

`install()` replaces that function with one that keeps the markers of the last few dicts it
wrapped. A new render of a dict whose keys and values are still the same objects, in the same
order, gets a new lazy dict copied from those markers at C speed, with the render's own templar,
as ansible-core would have built it: what a render resolves goes into its own lazy dict, never
into the markers, so nothing rendered is carried to the next render. Any other dict (a key or a
value replaced, added or removed, a loop's next item), any mapping that is not a plain dict,
and small dicts go to ansible-core's own function. `KUBEGPU_VARS_WRAP_REUSE=0` leaves
ansible-core's function in place; so does an ansible-core whose internals differ."""

from __future__ import annotations

import operator
import os
import typing as t
from collections.abc import Iterable, Mapping

from ansible.errors import AnsibleError

ENV = "KUBEGPU_VARS_WRAP_REUSE"
# Below this many variables a wrap is as cheap as the check.
SMALLEST = 32
# Dicts whose markers are kept: a task's renders use one dict, one host after another.
KEPT = 4

try:
    from ansible._internal._templating import _jinja_bits
    from ansible._internal._templating._lazy_containers import (
        _AnsibleLazyTemplateDict,
        _LazyValue,
        _LazyValueSource,
    )
    from ansible._internal._templating._utils import LazyOptions, TemplateContext
    from ansible.module_utils._internal._datatag import _EMPTY_INTERNAL_TAGS_MAPPING
except ImportError:  # another ansible-core: its own function stays
    _jinja_bits = None


class _Markers:
    __slots__ = ("keys", "lazy", "source", "values")

    def __init__(self, source: dict[t.Any, t.Any]) -> None:
        self.source = source  # held, so that its id is not reused while it is kept
        self.keys = tuple(source)
        self.values = tuple(source.values())
        self.lazy = {key: _LazyValue(value) for key, value in source.items()}

    def fit(self, mapping: dict[t.Any, t.Any]) -> bool:
        return (
            self.source is mapping
            and len(mapping) == len(self.keys)
            and all(map(operator.is_, mapping, self.keys))
            and all(map(operator.is_, mapping.values(), self.values))
        )


_kept: dict[int, _Markers] = {}
_original: t.Callable[[Mapping[t.Any, t.Any]], Iterable[Mapping[t.Any, t.Any]]] | None = None


def enabled() -> bool:
    value = os.environ.get(ENV, "1")
    if value not in ("0", "1"):
        raise AnsibleError(f"{ENV}={value!r}: allowed are 1 (the default: reuse) and 0 (off)")
    return value == "1"


def markers_of(mapping: dict[t.Any, t.Any]) -> _Markers:
    """The markers of this dict as it is now: the kept ones if nothing in it changed."""
    markers = _kept.get(id(mapping))
    if markers is None or not markers.fit(mapping):
        markers = _Markers(mapping)
        if len(_kept) >= KEPT:
            _kept.clear()  # no iteration: the results thread may render too
        _kept[id(mapping)] = markers
    return markers


def _flatten_and_lazify_vars(mapping: Mapping[t.Any, t.Any]) -> Iterable[Mapping[t.Any, t.Any]]:
    if type(mapping) is dict and len(mapping) >= SMALLEST:  # pylint: disable=unidiomatic-typecheck
        source = _LazyValueSource(
            source=markers_of(mapping).lazy,
            templar=TemplateContext.current().templar,
            lazy_options=LazyOptions.DEFAULT,
        )
        yield _AnsibleLazyTemplateDict._instance_factory(source, _EMPTY_INTERNAL_TAGS_MAPPING)
    else:
        assert _original is not None
        yield from _original(mapping)


def install() -> bool:
    """Put the reusing function in ansible-core's place (once); False where it stays out."""
    global _original
    if _jinja_bits is None or not enabled():
        return False
    if _original is None:
        _original = _jinja_bits._flatten_and_lazify_vars
        _jinja_bits._flatten_and_lazify_vars = _flatten_and_lazify_vars
    return True
