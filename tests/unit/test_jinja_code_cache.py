"""kubegpu.accel.jinja_code_cache: the code Jinja compiles from a template or an expression is kept
in memory and in a per-user folder, so that forked workers and later runs reuse it. What is
rendered must not change, and neither must the errors.

These tests drive ansible-core's own Templar, as a task would; bench/bench_node_plays.py
measures what the cache saves in a real run.
"""

from __future__ import annotations

import configparser
import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from ansible.errors import AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from tests.accel import TESTED, only_where_it_runs

# The accelerator's own tests: where it runs (tests/accel.py).
pytestmark = only_where_it_runs
if TESTED:  # ansible-core internals, which another minor need not have
    from ansible._internal._templating import _jinja_bits
    from ansible_collections.kubegpu.accel.plugins.callback import jinja_code_cache

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def plugin() -> ModuleType:
    return jinja_code_cache


@pytest.fixture
def installed(plugin: ModuleType) -> Iterator[Callable[..., Any]]:
    """installed(folder) -> a context manager with the cache in front of Jinja's compile."""

    @contextlib.contextmanager
    def use(folder: Path | None, max_entries: int = 1000) -> Iterator[Any]:
        cache = plugin.CodeCache(folder)
        assert plugin.install(cache)
        try:
            cache.open_folder(max_entries)
            yield cache
        finally:
            plugin.uninstall()

    yield use
    plugin.uninstall()


def render(source: str, variables: dict[str, Any], **options: Any) -> Any:
    return Templar(loader=DataLoader(), variables=variables).template(
        trust_as_template(source), **options
    )


def holds(expression: str, variables: dict[str, Any]) -> bool:
    templar = Templar(loader=DataLoader(), variables=variables)
    return bool(templar.evaluate_conditional(trust_as_template(expression)))


# Sources whose compiled code differs with the settings around them: the same text with and
# without backslash escaping, and a template that changes its own delimiters.
CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("{{ x + 1 }}", {"x": 41}, {}),
    ("{{ 'a_name' | regex_replace('^(.*)_name$', '\\1') }}", {}, {}),
    ("{{ 'a_name' | regex_replace('^(.*)_name$', '\\1') }}", {}, {"escape_backslashes": False}),
    ("#jinja2:variable_start_string:'[%', variable_end_string:'%]'\n[% x %] {{ x }}", {"x": 3}, {}),
    ("{% for i in items %}{{ i }},{% endfor %}", {"items": [1, 2]}, {}),
]


def expected_renders() -> list[Any]:
    return [render(source, variables, **options) for source, variables, options in CASES]


def test_a_template_renders_the_same_from_compiled_and_from_cached_code(
    installed: Callable[..., Any], tmp_path: Path
) -> None:
    want = expected_renders()
    assert want[1] != want[2]  # the escaping setting matters, so it must be part of the key
    with installed(tmp_path) as first:
        assert expected_renders() == want
        assert first.misses == len(CASES) and first.hits == 0
        assert first.stored == len(CASES)
    assert len(list(tmp_path.glob("*.code"))) == len(CASES)
    with installed(tmp_path) as second:  # a later run: everything comes from the folder
        assert len(second.code) == len(CASES)
        assert expected_renders() == want
        assert second.misses == 0 and second.hits == len(CASES)


def test_a_cached_run_does_not_compile_at_all(
    installed: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    variables = {"x": 2, "ys": [1, 2, 3]}
    sources = ["{{ x * 21 }}", "{{ ys | map('string') | join('-') }}"]
    conditions = ["x == 2 and ys | length > 2", "x is defined and x > 5"]
    with installed(tmp_path):
        want = [render(s, variables) for s in sources], [holds(c, variables) for c in conditions]
    assert want == ([42, "1-2-3"], [True, False])

    def no_compile(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Jinja compiled a source the cache holds")

    with installed(tmp_path):
        # Jinja's code generation is what the cache saves; with it broken, rendering still works.
        monkeypatch.setattr(_jinja_bits.AnsibleEnvironment, "_generate", no_compile)
        got = [render(s, variables) for s in sources], [holds(c, variables) for c in conditions]
    assert got == want


def test_a_source_that_does_not_compile_fails_as_before_and_is_not_stored(
    installed: Callable[..., Any], tmp_path: Path
) -> None:
    def error_of(call: Callable[[], Any]) -> str:
        with pytest.raises(AnsibleError) as caught:
            call()
        return str(caught.value.message)

    bad_template = "{{ x + }}"
    bad_condition = "x =="
    want = (
        error_of(lambda: render(bad_template, {"x": 1})),
        error_of(lambda: holds(bad_condition, {"x": 1})),
    )
    with installed(tmp_path) as cache:
        got = (
            error_of(lambda: render(bad_template, {"x": 1})),
            error_of(lambda: holds(bad_condition, {"x": 1})),
        )
        assert cache.stored == 0
    assert got == want
    assert not list(tmp_path.glob("*.code"))


def test_an_unreadable_entry_is_compiled_again(
    installed: Callable[..., Any], tmp_path: Path
) -> None:
    with installed(tmp_path):
        assert render("{{ x | int + 1 }}", {"x": "1"}) == 2
    (entry,) = tmp_path.glob("*.code")
    entry.write_bytes(b"not marshal data")
    with installed(tmp_path) as cache:
        assert not cache.code
        assert render("{{ x | int + 1 }}", {"x": "1"}) == 2
        assert cache.misses == 1 and cache.stored == 1


def test_a_folder_others_may_write_is_not_used(
    installed: Callable[..., Any], tmp_path: Path
) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    with installed(folder) as cache:
        assert cache.folder is None
        assert render("{{ 1 + 1 }}", {}) == 2
        assert cache.misses == 1  # kept in memory only
    assert not list(folder.iterdir())


def test_too_many_entries_empty_the_folder_and_stale_versions_go(
    installed: Callable[..., Any], tmp_path: Path, plugin: ModuleType
) -> None:
    folder = tmp_path / plugin.version_tag()
    folder.mkdir(mode=0o700)
    for number in range(5):
        (folder / f"{number:064x}.code").write_bytes(b"")
    stale, recent = tmp_path / ("0" * 16), tmp_path / ("1" * 16)
    for other in (stale, recent):
        other.mkdir()
    os.utime(stale, (0, 0))
    with installed(folder, max_entries=4) as cache:
        assert not list(folder.glob("*.code")) and not cache.code
    assert not stale.exists() and recent.is_dir()


def test_a_worker_forked_after_the_load_inherits_the_code(
    installed: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with installed(tmp_path):
        assert render("{{ x ~ '!' }}", {"x": "hi"}) == "hi!"
    with installed(tmp_path) as cache:
        assert len(cache.code) == 1
        (entry,) = tmp_path.glob("*.code")
        entry.unlink()  # the child can only find it in the memory it inherits
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                monkeypatch.setattr(_jinja_bits.AnsibleEnvironment, "_generate", None)
                ok = render("{{ x ~ '!' }}", {"x": "hi"}) == "hi!" and cache.misses == 0
                os.write(write, b"1" if ok else b"0")
            finally:
                os._exit(0)
        os.close(write)
        assert os.read(read, 1) == b"1"
        os.close(read)
        os.waitpid(pid, 0)


def test_the_repository_ansible_cfg_enables_it_and_a_playbook_fills_and_reuses_it(
    tmp_path: Path,
) -> None:
    config = configparser.ConfigParser(interpolation=None)
    config.read(REPO / "ansible.cfg")
    enabled = [name.strip() for name in config.get("defaults", "callbacks_enabled").split(",")]
    assert "kubegpu.accel.jinja_code_cache" in enabled
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  vars:\n    n: 4\n  tasks:\n"
        "    - ansible.builtin.debug:\n        msg: \"{{ range(n) | map('string') | join('+') }}\"\n"
        "      when: n is divisibleby 2\n"
        # A handler: ansible-core sends its start to the callback with the task alone.
        "      changed_when: true\n      notify: Handled\n"
        "  handlers:\n    - name: Handled\n      ansible.builtin.debug:\n        msg: handled\n"
    )
    cache_dir = tmp_path / "cache"
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        KUBEGPU_JINJA_CODE_CACHE_DIR=str(cache_dir),
        ANSIBLE_NOCOLOR="1",
    )
    argv = [
        str(Path(sys.executable).with_name("ansible-playbook")),
        "-i",
        "localhost,",
        "-c",
        "local",
    ]
    outputs = []
    for _run in range(2):
        done = subprocess.run(
            [*argv, str(playbook)], env=env, cwd=REPO, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "msg: 0+1+2+3" in done.stdout
        assert "Callback dispatch" not in done.stdout + done.stderr, done.stdout + done.stderr
        outputs.append(sorted(p.name for p in cache_dir.glob("*/*.code")))
    # The first run wrote the task's template and condition; the second found them all.
    assert len(outputs[0]) >= 2
    assert outputs[1] == outputs[0]
