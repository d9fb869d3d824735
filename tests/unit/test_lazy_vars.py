"""plugin_utils/lazy_vars.py: a task's renders share one lazy wrap of its variables, and every
render still sees the variables as they are and resolves them itself."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from ansible.errors import AnsibleError
from ansible.template import Templar, trust_as_template

from tests.accel import TESTED, only_where_it_runs

# The accelerator's own tests: where it runs (tests/accel.py).
pytestmark = only_where_it_runs
if TESTED:  # ansible-core internals, which another minor need not have
    from ansible._internal._templating import _jinja_bits
    from ansible_collections.kubegpu.accel.plugins.plugin_utils import lazy_vars


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The reusing function in place for this test only (ansible-core's back after it)."""
    monkeypatch.delenv(lazy_vars.ENV, raising=False)
    monkeypatch.setattr(
        _jinja_bits, "_flatten_and_lazify_vars", _jinja_bits._flatten_and_lazify_vars
    )
    monkeypatch.setattr(lazy_vars, "_original", None)
    monkeypatch.setattr(lazy_vars, "_kept", {})
    assert lazy_vars.install()
    assert _jinja_bits._flatten_and_lazify_vars is lazy_vars._flatten_and_lazify_vars
    yield


def task_vars() -> dict[str, Any]:
    """As many variables as a task has, some of them templates."""
    found: dict[str, Any] = {f"filler_{i}": i for i in range(lazy_vars.SMALLEST)}
    found.update(
        level=1,
        above=trust_as_template("{{ level + 1 }}"),
        # The short name: the FQCN needs ansible's collection finder, which would stay
        # installed in this test process for the tests after this one.
        stamp=trust_as_template("{{ lookup('pipe', 'date +%s%N') }}"),
        item="a",
    )
    return found


def render(templar: Templar, text: str) -> Any:
    return templar.template(trust_as_template(text))


def test_the_renders_of_unchanged_variables_share_their_markers(installed: None) -> None:
    variables = task_vars()
    templar = Templar(variables=variables)
    assert render(templar, "{{ above }}") == 2
    markers = lazy_vars._kept[id(variables)]
    assert render(templar, "{{ above }} {{ item }}") == "2 a"
    assert lazy_vars._kept[id(variables)] is markers
    assert lazy_vars.markers_of(variables) is markers


def test_each_render_resolves_the_variables_itself(installed: None) -> None:
    # A variable whose template calls a lookup is resolved again at each render, as ansible-core
    # does: what one render resolved is not handed to the next.
    variables = task_vars()
    templar = Templar(variables=variables)
    first = render(templar, "{{ stamp }}")
    second = render(templar, "{{ stamp }}")
    assert lazy_vars._kept[id(variables)].source is variables
    assert first != second and first.isdigit() and second.isdigit()
    # Within one render, once.
    twice = render(templar, "{{ stamp }} {{ stamp }}").split()
    assert twice[0] == twice[1]


SHOWN = (
    "{{ item | default('-') }} {{ above }} {{ extra | default('-') }} {{ moved | default('-') }}"
)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("next item", "b 2 - -"),
        ("value under a key", "a 6 - -"),
        ("key added", "a 2 new -"),
        ("key removed", "a 2 - -"),
        ("key swapped", "a 2 new -"),
        ("key renamed", "- 2 - a"),
    ],
)
def test_a_render_sees_every_change_to_the_variables(
    installed: None, change: str, expected: str
) -> None:
    variables = task_vars()
    if change == "key removed":
        variables["extra"] = "gone"
    templar = Templar(variables=variables)
    assert render(templar, SHOWN) == ("a 2 gone -" if change == "key removed" else "a 2 - -")
    before = lazy_vars.markers_of(variables)
    if change == "next item":
        variables["item"] = "b"  # a loop's next item: the same key, another value
    elif change == "value under a key":
        variables["level"] = 5
    elif change == "key added":
        variables["extra"] = "new"
    elif change == "key removed":
        del variables["extra"]
    elif change == "key swapped":
        # As many keys as before, another one among them.
        del variables["filler_0"]
        variables["extra"] = "new"
    else:
        # The same values in the same order, under another last key.
        variables["moved"] = variables.pop("item")
    assert render(templar, SHOWN) == expected
    assert lazy_vars.markers_of(variables) is not before


def test_small_dicts_and_other_mappings_keep_to_ansible_core_s_wrap(installed: None) -> None:
    small = {"level": 1, "above": trust_as_template("{{ level + 1 }}")}
    assert render(Templar(variables=small), "{{ above }}") == 2
    assert id(small) not in lazy_vars._kept


def test_only_the_last_few_dicts_are_kept(installed: None) -> None:
    kept = [task_vars() for _ in range(lazy_vars.KEPT + 1)]
    for variables in kept:
        assert render(Templar(variables=variables), "{{ above }}") == 2
    assert 0 < len(lazy_vars._kept) <= lazy_vars.KEPT
    assert lazy_vars._kept[id(kept[-1])].source is kept[-1]


def test_it_is_off_with_0_and_a_wrong_value_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    original = _jinja_bits._flatten_and_lazify_vars
    monkeypatch.setattr(lazy_vars, "_original", None)
    monkeypatch.setenv(lazy_vars.ENV, "0")
    assert lazy_vars.install() is False
    assert _jinja_bits._flatten_and_lazify_vars is original
    for wrong in ("2", "yes", ""):
        monkeypatch.setenv(lazy_vars.ENV, wrong)
        with pytest.raises(AnsibleError, match=r"KUBEGPU_VARS_WRAP_REUSE=.*allowed are 1 .* and 0"):
            lazy_vars.install()
    assert _jinja_bits._flatten_and_lazify_vars is original
