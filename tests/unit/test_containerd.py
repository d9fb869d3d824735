"""Unit tests for plugins/module_utils/containerd.py and containerd_validate.py: pure logic, no
containerd needed.

Inputs are real: the captures in src/kubegpu/captures/runtime-config and the outputs of real
containerd 1.6.20, 1.7.24 and 2.1.9 binaries in tests/unit/data/containerd (see SOURCES.md there).
What containerd itself does with these files is tested in tests/integration/test_containerd_host.py.
"""

from __future__ import annotations

import copy
import re
import tomllib
from pathlib import Path

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import containerd as c
from ansible_collections.kubegpu.gpu.plugins.module_utils import containerd_validate as cv
from ansible_collections.kubegpu.gpu.plugins.module_utils import toml_text

DATA = Path(__file__).parent / "data" / "containerd"
NVCT = "/usr/bin/nvidia-container-runtime"

DEFAULT_16 = DATA / "config-default-containerd-1.6.20-debian12.toml"
DEFAULT_17 = DATA / "config-default-containerd-1.7.24-debian13.toml"
DEFAULT_21 = DATA / "config-default-containerd-2.1.9-debian-sid.toml"
DEBIAN_ETC = DATA / "etc-config-debian12-package-containerd-1.6.20.toml"


@pytest.fixture(scope="module")
def runtime_config(fixtures_real: Path) -> Path:
    return fixtures_real / "runtime-config"


@pytest.fixture(scope="module")
def nvct_v2(runtime_config: Path) -> Path:
    return (
        runtime_config / "containerd-v2-nvidia-ctk-created-set-as-default-nvidia-docker-1788.toml"
    )


def load(path: Path) -> dict:
    return tomllib.loads(path.read_text())


def schema(version: tuple, config_version: int | None) -> c.Schema:
    return c.choose_schema(version, config_version, True)


def merged_like_containerd(effective: dict, drop_in: dict, sch: c.Schema) -> dict:
    """What containerd makes of an effective config plus the drop-in: 1.x replaces the plugin
    section (issue 5837, shown with the real binary in the host test), 2.x merges key by key."""
    out = copy.deepcopy(effective)
    section = drop_in["plugins"][sch.plugin_id]
    if sch.merge == "replace":
        out["plugins"][sch.effective_plugin_id] = copy.deepcopy(section)
        return out

    def deep(dst: dict, src: dict) -> None:
        for key, value in src.items():
            if isinstance(value, dict) and isinstance(dst.get(key), dict):
                deep(dst[key], value)
            else:
                dst[key] = copy.deepcopy(value)

    deep(out["plugins"][sch.effective_plugin_id], section)
    return out


# --- the TOML reader and writer --------------------------------------------------------------------


def real_toml_files(runtime_config: Path) -> list[Path]:
    return sorted(DATA.glob("*.toml")) + sorted(runtime_config.glob("*.toml"))


def test_builtin_reader_matches_tomllib_on_every_real_config(runtime_config: Path) -> None:
    files = real_toml_files(runtime_config)
    assert len(files) == 5
    for path in files:
        text = path.read_text()
        assert c.toml_loads_builtin(text, str(path)) == tomllib.loads(text), path.name


@pytest.mark.parametrize(
    "text",
    [
        'a = "x\\ty\\u00e9\\"q"\nb = \'C:\\path\'\n',
        "m = \"\"\"\nline one\\\n   joined\n\"\"\"\nl = '''\nraw \\n'''\n",
        "h = 0xff\no = 0o17\nbi = 0b101\nn = -1_000\nf = 6.02e23\ng = -0.5\ni = inf\n",
        "x = [1, [2, 3], ['a', \"b\"],\n  # comment\n  4,\n]\n",
        'p = { name = "a", inner = { v = true } }\n',
        '[a]\nb.c = 1\n"d.e" = 2\n[a.f]\ng = false\n',
        '[[fruit]]\nname = "apple"\n[[fruit]]\nname = "pear"\n[fruit.extra]\nk = 1\n',
        '\'literal key\' = 1\n"quoted \\" key" = 2\n',
    ],
)
def test_builtin_reader_matches_tomllib_on_toml_forms(text: str) -> None:
    assert c.toml_loads_builtin(text) == tomllib.loads(text)


def test_builtin_reader_keeps_dates_as_text() -> None:
    assert c.toml_loads_builtin("d = 2024-05-01T10:00:00Z\n") == {"d": "2024-05-01T10:00:00Z"}


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        ('a = "open\n', "line 1", "unterminated string"),
        ("a = 1\na = 2\n", "line 2", "defined twice"),
        ("[x]\nkey value\n", "line 2", "expected '='"),
        ("a = nope\n", "line 1", "not a TOML value"),
        ("a = [1, 2\n", "line 2", "expected ',' or ']' in an array"),
        ("a = 1 b = 2\n", "line 1", "end of the line"),
    ],
)
def test_builtin_reader_errors_name_the_place(text: str, where: str, what: str) -> None:
    with pytest.raises(c.ContainerdConfigError) as err:
        c.toml_loads_builtin(text, "cfg.toml")
    assert "cfg.toml" in str(err.value)
    assert where in str(err.value)
    assert what in str(err.value)


@pytest.mark.parametrize("path", [DEFAULT_16, DEFAULT_17, DEFAULT_21, DEBIAN_ETC])
def test_writer_round_trips_real_dumps(path: Path) -> None:
    data = load(path)
    for indent in (True, False):
        text = c.toml_dumps(data, indent=indent)
        assert tomllib.loads(text) == data
        assert c.toml_loads_builtin(text) == data


def test_writer_quotes_keys_and_escapes_strings() -> None:
    data = {"plugins": {"io.containerd.x": {'we"ird': 'a"b\\c\n', "list": [1, "two"], "ok": True}}}
    text = c.toml_dumps(data)
    assert '[plugins."io.containerd.x"]' in text
    assert tomllib.loads(text) == data


def test_writer_writes_arrays_of_tables() -> None:
    data = {"a": [{"x": 1}, {"x": 2, "sub": {"y": "z"}}]}
    assert tomllib.loads(c.toml_dumps(data)) == data


# --- the imports line -----------------------------------------------------------------------------

ENTRY = "/etc/containerd/conf.d/*.toml"
Q = '"/etc/containerd/conf.d/*.toml"'

SURGERY = [
    (
        "no imports, version first",
        'version = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "p:1"\n',
        "version = 2\nimports = ["
        + Q
        + ']\n\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "p:1"\n',
    ),
    (
        "no imports, version after other root keys and comments",
        '# site config\nroot = "/var/lib/containerd"\nversion = 2 # pinned\noom_score = 0\n[grpc]\n  address = "/run/x.sock"\n',
        '# site config\nroot = "/var/lib/containerd"\nversion = 2 # pinned\nimports = ['
        + Q
        + ']\noom_score = 0\n[grpc]\n  address = "/run/x.sock"\n',
    ),
    (
        "no imports, no version: after the last root key",
        'root = "/data/containerd"\n\n[plugins.cri]\n  sandbox_image = "p:1"\n',
        'root = "/data/containerd"\nimports = ['
        + Q
        + ']\n\n[plugins.cri]\n  sandbox_image = "p:1"\n',
    ),
    (
        "only tables: on top",
        '[plugins.cri]\n  sandbox_image = "p:1"\n',
        "imports = [" + Q + ']\n[plugins.cri]\n  sandbox_image = "p:1"\n',
    ),
    ("empty file", "", "imports = [" + Q + "]\n"),
    ("no newline at the end", "version = 2", "version = 2\nimports = [" + Q + "]\n"),
    (
        "empty array (containerd config default)",
        "version = 2\nimports = []\noom_score = 0\n",
        "version = 2\nimports = [" + Q + "]\noom_score = 0\n",
    ),
    (
        "empty array with a space and a comment",
        "imports = [ ] # none yet\nversion = 2\n",
        "imports = [" + Q + "] # none yet\nversion = 2\n",
    ),
    (
        "single line with other entries",
        "version = 2\nimports = [\"/etc/containerd/site.toml\", '/opt/x/*.toml']\n",
        "version = 2\nimports = [\"/etc/containerd/site.toml\", '/opt/x/*.toml', " + Q + "]\n",
    ),
    (
        "single line with a trailing comma",
        'imports = ["/a.toml",]\n',
        'imports = ["/a.toml", ' + Q + ",]\n",
    ),
    (
        "multi-line with trailing commas and comments",
        'version = 2\nimports = [\n    "/etc/containerd/site.toml",  # site settings\n    "/etc/containerd/registry.toml", # mirrors, see [docs]\n]\n[grpc]\n',
        'version = 2\nimports = [\n    "/etc/containerd/site.toml",  # site settings\n    "/etc/containerd/registry.toml", # mirrors, see [docs]\n    '
        + Q
        + ",\n]\n[grpc]\n",
    ),
    (
        "multi-line without a trailing comma, comment after the last entry",
        'imports = [\n  "/a.toml",\n  "/b.toml" # last\n]\n',
        'imports = [\n  "/a.toml",\n  "/b.toml", # last\n  ' + Q + "\n]\n",
    ),
    (
        "multi-line, closing bracket on the last entry's line",
        'imports = [\n  "/a.toml",\n  "/b.toml"]\nversion = 2\n',
        'imports = [\n  "/a.toml",\n  "/b.toml", ' + Q + "]\nversion = 2\n",
    ),
    (
        "multi-line, first entry on the opening line",
        'imports = ["/a.toml",\n           "/b.toml"\n]\n',
        'imports = ["/a.toml",\n           "/b.toml",\n           ' + Q + "\n]\n",
    ),
    (
        "comments mentioning imports and brackets before it",
        '# imports = ["/old/*.toml"] was here\nversion = 2 # [not a table]\nimports = ["/a.toml"]\n',
        '# imports = ["/old/*.toml"] was here\nversion = 2 # [not a table]\nimports = ["/a.toml", '
        + Q
        + "]\n",
    ),
    (
        "imports inside a table is not the root key",
        'version = 2\n[proxy_plugins.x]\n  imports = ["y"]\n',
        "version = 2\nimports = [" + Q + ']\n[proxy_plugins.x]\n  imports = ["y"]\n',
    ),
    (
        "multi-line string before the first table holds a bracket line",
        'version = 2\nnote = """\n[not.a.table]\n"""\n[grpc]\n',
        "version = 2\nimports = [" + Q + ']\nnote = """\n[not.a.table]\n"""\n[grpc]\n',
    ),
    (
        "CRLF line endings are kept",
        'version = 2\r\nimports = [\r\n  "/a.toml",\r\n]\r\n[grpc]\r\n',
        'version = 2\r\nimports = [\r\n  "/a.toml",\r\n  ' + Q + ",\r\n]\r\n[grpc]\r\n",
    ),
]


@pytest.mark.parametrize(("name", "before", "after"), SURGERY, ids=[s[0] for s in SURGERY])
def test_add_import_changes_only_the_imports_line(name: str, before: str, after: str) -> None:
    result = c.add_import(before, ENTRY)
    assert result == after
    old, new = tomllib.loads(before), tomllib.loads(result)
    expected = dict(old)
    expected["imports"] = [*old.get("imports", []), ENTRY]
    assert new == expected
    assert c.scan_top_level(result)["imports"]["values"][-1] == ENTRY


def test_add_import_on_the_real_configs_keeps_every_other_byte(runtime_config: Path) -> None:
    for path in real_toml_files(runtime_config):
        before = path.read_text()
        after = c.add_import(before, ENTRY)
        # exactly one line differs or was added
        removed = [ln for ln in before.splitlines() if ln not in after.splitlines()]
        added = [ln for ln in after.splitlines() if ln not in before.splitlines()]
        assert len(added) == 1 and added[0].startswith("imports = ["), path.name
        assert removed in ([], ["imports = []"]), path.name
        data = tomllib.loads(after)
        assert data["imports"] == [ENTRY]
        data.pop("imports")
        original = tomllib.loads(before)
        original.pop("imports", None)
        assert data == original


def test_replace_imports_spells_out_a_list() -> None:
    text = 'version = 2\nimports = [\n  "/a/*.toml", # x\n]\n[grpc]\n'
    out = c.replace_imports(text, ["/tmp/s/a.toml", "/tmp/s/99.toml"])
    assert tomllib.loads(out)["imports"] == ["/tmp/s/a.toml", "/tmp/s/99.toml"]
    assert out.endswith("\n[grpc]\n")
    assert tomllib.loads(c.replace_imports("version = 3\n", ["/x.toml"]))["imports"] == ["/x.toml"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('version = "2"\n', "whole number"),
        ('imports = "/etc/containerd/conf.d/*.toml"\n', "list of file paths"),
        ("imports = [1, 2]\n", "list of file paths"),
        ("imports.x = 1\n", "list at the top"),
        ("version = 2\nimports = [\n", "expected"),
    ],
)
def test_scan_refuses_what_containerd_would_refuse(text: str, message: str) -> None:
    with pytest.raises(c.ContainerdConfigError, match=message):
        c.add_import(text, ENTRY, "/etc/containerd/config.toml")


def test_scan_reads_version_and_region() -> None:
    text = "version = 3\nimports = []\n[grpc]\n"
    scan = c.scan_top_level(text)
    assert scan["version"] == 3
    assert scan["imports"]["values"] == []
    assert text[scan["region_end"] :].startswith("[grpc]")
    assert c.scan_top_level("[a]\nversion = 9\n")["version"] is None


# --- versions and schemas ------------------------------------------------------------------------


def test_parse_containerd_version_from_real_outputs() -> None:
    lines = (DATA / "containerd-version-outputs.txt").read_text().splitlines()
    assert [c.parse_containerd_version(line) for line in lines] == [
        (1, 6, 20),
        (1, 7, 24),
        (2, 1, 9),
    ]


@pytest.mark.parametrize(
    "text", ["", "containerd", "containerd github.com/containerd/containerd unknown"]
)
def test_parse_containerd_version_refuses_garbage(text: str) -> None:
    with pytest.raises(c.ContainerdConfigError, match="cannot read a version"):
        c.parse_containerd_version(text)


@pytest.mark.parametrize(
    ("version", "config_version", "exists", "expected"),
    [
        ((1, 6, 20), 2, True, (2, "io.containerd.grpc.v1.cri", "replace", True)),
        ((1, 7, 24), 2, True, (2, "io.containerd.grpc.v1.cri", "replace", True)),
        ((1, 6, 20), None, True, (1, "cri", "replace", False)),
        ((1, 6, 20), 1, True, (1, "cri", "replace", False)),
        ((1, 7, 24), 0, True, (1, "cri", "replace", False)),
        ((1, 6, 20), None, False, (2, "io.containerd.grpc.v1.cri", "replace", True)),
        ((2, 1, 9), 2, True, (2, "io.containerd.grpc.v1.cri", "deep", True)),
        ((2, 1, 9), 3, True, (3, "io.containerd.cri.v1.runtime", "deep", True)),
        ((2, 0, 0), None, False, (3, "io.containerd.cri.v1.runtime", "deep", True)),
    ],
)
def test_choose_schema(version, config_version, exists, expected) -> None:
    s = c.choose_schema(version, config_version, exists)
    assert (s.config_version, s.plugin_id, s.merge, s.write_version) == expected
    assert s.effective_plugin_id == (
        "io.containerd.grpc.v1.cri" if version[0] == 1 else "io.containerd.cri.v1.runtime"
    )


@pytest.mark.parametrize(
    ("version", "config_version", "message"),
    [
        ((2, 3, 0), 4, "version = 4"),
        ((2, 1, 9), 5, "versions 2 \\(containerd 1.x\\) and 3"),
        ((1, 7, 24), 4, "version = 4"),
        ((1, 7, 24), 3, "cannot load \\(1.x reads versions 1 and 2\\)"),
        ((2, 1, 9), None, "containerd config migrate"),
        ((2, 1, 9), 1, "does not read version 1"),
        ((1, 5, 9), 2, "older than 1.6"),
        ((3, 0, 0), 3, "newer than kubegpu knows"),
    ],
)
def test_choose_schema_refuses_with_a_clear_message(version, config_version, message) -> None:
    with pytest.raises(c.ContainerdConfigError, match=message) as err:
        c.choose_schema(version, config_version, True, "/etc/containerd/config.toml")
    assert "containerd" in str(err.value)


def test_the_nvidia_ctk_1_18_0_log_agrees_on_version_and_plugin(
    runtime_config: Path, tmp_path: Path
) -> None:
    """nvidia-ctk 1.18.0 chose config version 2 and io.containerd.grpc.v1.cri, as we do, but
    wrote to config.d, which `imports = [".../conf.d/*.toml"]` does not load."""
    log = (runtime_config / "nvidia-ctk-1.18.0-configure-containerd-log-nvct-1404.txt").read_text()
    logged_version = int(re.search(r"Using config version (\d+)", log).group(1))
    logged_plugin = re.search(r'Using CRI runtime plugin name "([^"]+)"', log).group(1)
    written = re.search(r"Wrote updated config to (\S+)", log).group(1)
    s = c.choose_schema((1, 7, 24), logged_version, True)
    assert (s.config_version, s.plugin_id) == (logged_version, logged_plugin)
    assert not c.is_imported([ENTRY], "/etc/containerd/config.toml", written)

    # The same layout under tmp_path: the stray file is found, ours is not reported.
    etc = tmp_path / "etc" / "containerd"
    rel = Path(written).relative_to("/etc/containerd")
    (etc / rel).parent.mkdir(parents=True)
    (etc / rel).write_text("version = 2\n")
    (etc / "conf.d").mkdir()
    (etc / "conf.d" / "99-nvidia.toml").write_text("version = 2\n")
    main = str(etc / "config.toml")
    strays = c.stray_drop_ins(main, str(etc / "conf.d"), [str(etc / "conf.d" / "*.toml")])
    assert strays == [str(etc / rel)]
    assert (
        c.stray_drop_ins(
            main, str(etc / "conf.d"), [str(etc / "conf.d" / "*.toml"), "config.d/*.toml"]
        )
        == []
    )


# --- SystemdCgroup and the rendered drop-in -----------------------------------------------------------


def with_runc_systemd(path: Path, plugin: str, value: bool) -> dict:
    data = load(path)
    data["plugins"][plugin]["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] = value
    return data


@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize(
    ("path", "version", "plugin"),
    [
        (DEFAULT_16, (1, 6, 20), "io.containerd.grpc.v1.cri"),
        (DEFAULT_17, (1, 7, 24), "io.containerd.grpc.v1.cri"),
        (DEFAULT_21, (2, 1, 9), "io.containerd.cri.v1.runtime"),
    ],
)
def test_systemd_cgroup_is_copied_from_runc(path: Path, version, plugin: str, value: bool) -> None:
    effective = with_runc_systemd(path, plugin, value)
    sch = schema(version, 2 if version[0] == 1 else 3)
    assert c.source_systemd_cgroup(effective, sch, "nvidia") == (
        value,
        "runtimes.runc.options.SystemdCgroup",
    )


def test_systemd_cgroup_follows_a_custom_default_runtime() -> None:
    effective = load(DEFAULT_21)
    runtime = effective["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]
    runtime["default_runtime_name"] = "crun"
    runtime["runtimes"]["crun"] = {
        "runtime_type": "io.containerd.runc.v2",
        "options": {"SystemdCgroup": True},
    }
    sch = schema((2, 1, 9), 3)
    assert c.source_systemd_cgroup(effective, sch, "nvidia") == (
        True,
        "runtimes.crun.options.SystemdCgroup",
    )


def test_systemd_cgroup_without_any_runtime_is_false_and_says_why() -> None:
    effective = load(DEFAULT_16)
    effective["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"] = {}
    value, why = c.source_systemd_cgroup(effective, schema((1, 6, 20), 2), "nvidia")
    assert value is False
    assert "no runc runtime" in why


def test_nvidia_ctk_created_config_as_the_main_config(nvct_v2: Path) -> None:
    """The fixture: nvidia-ctk made nvidia the default runtime, with SystemdCgroup = true added by
    hand, and no runc. Its own nvidia entry is where SystemdCgroup comes from; the default stays."""
    main = nvct_v2.read_text()
    scan = c.scan_top_level(main)
    assert scan["version"] == 2 and scan["imports"] is None
    sch = c.choose_schema((1, 6, 20), scan["version"], True)
    # containerd 1.6 dumps this config with the same CRI section (plus defaults); the section as
    # written is what matters here.
    effective = tomllib.loads(main)
    value, why = c.source_systemd_cgroup(effective, sch, "nvidia")
    assert (value, why) == (True, "runtimes.nvidia.options.SystemdCgroup")
    text = c.render_drop_in(sch, "nvidia", NVCT, value, False, c.effective_cri(effective, sch))
    drop_in = tomllib.loads(text)
    assert drop_in["version"] == 2
    cri = drop_in["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert cri["containerd"]["runtimes"]["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2",
        "options": {"BinaryName": NVCT, "SystemdCgroup": True},
    }
    merged = merged_like_containerd(effective, drop_in, sch)
    assert cv.check_effective(merged, sch, "nvidia", NVCT, True, False) == []


@pytest.mark.parametrize("default_runtime", [False, True])
@pytest.mark.parametrize(("path", "version"), [(DEFAULT_16, (1, 6, 20)), (DEFAULT_17, (1, 7, 24))])
def test_replace_mode_drop_in_carries_the_whole_cri_section(
    path: Path, version, default_runtime: bool
) -> None:
    effective = with_runc_systemd(path, "io.containerd.grpc.v1.cri", True)
    effective["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"] = "registry.example/pause:9"
    sch = schema(version, 2)
    value, _ = c.source_systemd_cgroup(effective, sch, "nvidia")
    text = c.render_drop_in(
        sch, "nvidia", NVCT, value, default_runtime, c.effective_cri(effective, sch)
    )
    assert text.startswith("# " + c.MANAGED_MARK)
    drop_in = tomllib.loads(text)
    assert c.toml_loads_builtin(text) == drop_in
    assert drop_in["version"] == 2
    section = copy.deepcopy(drop_in["plugins"]["io.containerd.grpc.v1.cri"])
    original = copy.deepcopy(effective["plugins"]["io.containerd.grpc.v1.cri"])
    nvidia = section["containerd"]["runtimes"].pop("nvidia")
    if default_runtime:
        assert section["containerd"].pop("default_runtime_name") == "nvidia"
        original["containerd"].pop("default_runtime_name")
    assert section == original  # every other CRI setting kept, runc included
    assert nvidia == {
        "runtime_type": "io.containerd.runc.v2",
        "options": {"BinaryName": NVCT, "SystemdCgroup": True},
    }
    merged = merged_like_containerd(effective, drop_in, sch)
    assert cv.check_effective(merged, sch, "nvidia", NVCT, True, default_runtime) == []
    # and the merge loses nothing else
    assert (
        merged["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"]
        == "registry.example/pause:9"
    )


@pytest.mark.parametrize("default_runtime", [False, True])
@pytest.mark.parametrize(
    ("main", "config_version", "plugin"),
    [(DEFAULT_21, 3, "io.containerd.cri.v1.runtime"), (DEBIAN_ETC, 2, "io.containerd.grpc.v1.cri")],
)
def test_deep_mode_drop_in_holds_only_the_runtime(
    main: Path, config_version: int, plugin: str, default_runtime: bool
) -> None:
    effective = with_runc_systemd(DEFAULT_21, "io.containerd.cri.v1.runtime", True)
    sch = c.choose_schema((2, 1, 9), c.scan_top_level(main.read_text())["version"], True)
    assert (sch.config_version, sch.plugin_id) == (config_version, plugin)
    value, _ = c.source_systemd_cgroup(effective, sch, "nvidia")
    text = c.render_drop_in(sch, "nvidia", NVCT, value, default_runtime)
    containerd = {
        "runtimes": {
            "nvidia": {
                "runtime_type": "io.containerd.runc.v2",
                "options": {"BinaryName": NVCT, "SystemdCgroup": True},
            }
        }
    }
    if default_runtime:
        containerd["default_runtime_name"] = "nvidia"
    assert tomllib.loads(text) == {
        "version": config_version,
        "plugins": {plugin: {"containerd": containerd}},
    }
    assert "\n[plugins" in text  # not indented: a short file
    # containerd 2.x migrates a version 2 drop-in's plugin to io.containerd.cri.v1.runtime
    merged = merged_like_containerd(effective, tomllib.loads(text), sch)
    assert cv.check_effective(merged, sch, "nvidia", NVCT, True, default_runtime) == []


@pytest.mark.parametrize("nvidia", [True, False])
@pytest.mark.parametrize(("path", "version"), [(DEFAULT_17, (1, 7, 24)), (DEFAULT_21, (2, 1, 9))])
def test_a_set_cgroup_driver_puts_runc_in_the_drop_in_with_its_other_settings(
    path: Path, version: tuple, nvidia: bool
) -> None:
    # Debian's containerd runs runc with SystemdCgroup false; a kubelet on the systemd cgroup
    # driver (kubeadm's default) needs it true.
    sch = schema(version, 2 if version[0] == 1 else 3)
    effective = with_runc_systemd(path, sch.effective_plugin_id, False)
    found, _ = c.source_systemd_cgroup(effective, sch, "nvidia")
    assert found is False
    runtimes = c.cgroup_runtimes(effective, sch, "nvidia", True)
    assert sorted(runtimes) == ["runc"]
    source_runc = effective["plugins"][sch.effective_plugin_id]["containerd"]["runtimes"]["runc"]
    assert runtimes["runc"] == dict(
        source_runc, options=dict(source_runc["options"], SystemdCgroup=True)
    )
    text = c.render_drop_in(
        sch,
        "nvidia",
        NVCT,
        True,
        True,
        c.effective_cri(effective, sch) if sch.merge == "replace" else None,
        nvidia=nvidia,
        set_cgroup=runtimes,
    )
    drop_in = tomllib.loads(text)
    section = drop_in["plugins"][sch.plugin_id]["containerd"]
    assert ("nvidia" in section["runtimes"]) is nvidia
    # Without the nvidia runtime it cannot be the default one: 1.x keeps runc from the copied
    # section, and a 2.x drop-in names none.
    if nvidia:
        assert section["default_runtime_name"] == "nvidia"
    elif sch.merge == "replace":
        assert section["default_runtime_name"] == "runc"
    else:
        assert "default_runtime_name" not in section
    assert "SystemdCgroup = true on runc" in text
    merged = merged_like_containerd(effective, drop_in, sch)
    runc = merged["plugins"][sch.effective_plugin_id]["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"]["SystemdCgroup"] is True
    assert (
        cv.check_effective(
            merged, sch, "nvidia", NVCT, True, nvidia, nvidia=nvidia, cgroup_runtimes=["runc"]
        )
        == []
    )
    # The same drop-in with runc left as the other files have it: the check names it.
    unset = with_runc_systemd(path, sch.effective_plugin_id, False)
    problems = cv.check_effective(
        unset, sch, "nvidia", NVCT, True, False, nvidia=False, cgroup_runtimes=["runc"]
    )
    assert problems == [
        f"plugins.{sch.effective_plugin_id}.containerd.runtimes.runc.options.SystemdCgroup"
        " is False, expected True"
    ]


def test_a_set_cgroup_driver_follows_a_custom_default_runtime_and_runc() -> None:
    effective = load(DEFAULT_21)
    cri = effective["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]
    cri["default_runtime_name"] = "crun"
    cri["runtimes"]["crun"] = {"runtime_type": "io.containerd.runc.v2", "options": {}}
    runtimes = c.cgroup_runtimes(effective, schema((2, 1, 9), 3), "nvidia", False)
    assert sorted(runtimes) == ["crun", "runc"]
    assert all(r["options"]["SystemdCgroup"] is False for r in runtimes.values())
    # A config with no runtime at all gets a runc of containerd's default type.
    cri["runtimes"] = {}
    cri["default_runtime_name"] = "runc"
    assert c.cgroup_runtimes(effective, schema((2, 1, 9), 3), "nvidia", True) == {
        "runc": {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}}
    }


def test_without_the_nvidia_runtime_or_a_cgroup_the_2_x_drop_in_has_no_runtimes() -> None:
    sch = schema((2, 1, 9), 3)
    text = c.render_drop_in(sch, "nvidia", NVCT, False, True, nvidia=False)
    assert "only kubegpu's settings are here" in text
    assert tomllib.loads(text) == {"version": 3, "plugins": {"io.containerd.cri.v1.runtime": {}}}


def test_version_1_drop_in_has_no_version_and_the_short_plugin_name() -> None:
    effective = load(DEFAULT_16)  # containerd 1.x dumps a version 1 config in version 2 form
    sch = c.choose_schema((1, 6, 20), None, True)
    text = c.render_drop_in(sch, "nvidia", NVCT, False, False, c.effective_cri(effective, sch))
    data = tomllib.loads(text)
    assert "version" not in data
    assert list(data["plugins"]) == ["cri"]
    assert (
        data["plugins"]["cri"]["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == NVCT
    )
    assert "runc" in data["plugins"]["cri"]["containerd"]["runtimes"]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            lambda r: r.update(runtime_type="io.containerd.runsc.v1"),
            "runtime_type is 'io.containerd.runsc.v1'",
        ),
        (
            lambda r: r["options"].update(BinaryName="/usr/bin/runc"),
            "BinaryName is '/usr/bin/runc'",
        ),
        (
            lambda r: r["options"].update(SystemdCgroup=True),
            "SystemdCgroup is True, expected False",
        ),
    ],
)
def test_check_effective_names_each_difference(change, problem: str) -> None:
    effective = load(DEFAULT_16)
    sch = schema((1, 6, 20), 2)
    runtime = {
        "runtime_type": "io.containerd.runc.v2",
        "options": {"BinaryName": NVCT, "SystemdCgroup": False},
    }
    effective["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"] = runtime
    assert cv.check_effective(effective, sch, "nvidia", NVCT, False, False) == []
    change(runtime)
    problems = cv.check_effective(effective, sch, "nvidia", NVCT, False, False)
    assert len(problems) == 1 and problem in problems[0]


def test_check_effective_reports_a_missing_runtime_and_default() -> None:
    effective = load(DEFAULT_16)
    sch = schema((1, 6, 20), 2)
    assert cv.check_effective(effective, sch, "nvidia", NVCT, False, False) == [
        "the effective config has no plugins.io.containerd.grpc.v1.cri.containerd.runtimes.nvidia"
    ]
    effective["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"] = {
        "nvidia": {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": NVCT}}
    }
    problems = cv.check_effective(effective, sch, "nvidia", NVCT, False, True)
    assert "default_runtime_name is 'runc', expected 'nvidia'" in problems
    assert "default_runtime_name 'runc' names no configured runtime" in problems


# --- CDI (enable_cdi and the spec directories) -------------------------------------------------


def test_cdi_on_1_7_is_turned_on_in_the_drop_in_with_the_spec_dirs() -> None:
    effective = load(DEFAULT_17)  # containerd 1.7.24's own default: enable_cdi = false
    sch = schema((1, 7, 24), 2)
    keys, state, warnings = c.cdi_settings(effective, sch, (1, 7, 24), True)
    assert keys == {"enable_cdi": True, "cdi_spec_dirs": ["/etc/cdi", "/var/run/cdi"]}
    assert state == {"enabled": True, "spec_dirs": keys["cdi_spec_dirs"], "source": "drop-in"}
    assert warnings == []
    text = c.render_drop_in(
        sch, "nvidia", NVCT, False, False, c.effective_cri(effective, sch), keys
    )
    drop_in = tomllib.loads(text)
    assert c.toml_loads_builtin(text) == drop_in
    section = copy.deepcopy(drop_in["plugins"]["io.containerd.grpc.v1.cri"])
    assert section["enable_cdi"] is True
    assert section["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
    # The rest of the section is the dumped one: only enable_cdi differs (and the runtime).
    original = copy.deepcopy(effective["plugins"]["io.containerd.grpc.v1.cri"])
    section["containerd"]["runtimes"].pop("nvidia")
    assert {k for k in section if section[k] != original.get(k)} == {"enable_cdi"}
    merged = merged_like_containerd(effective, drop_in, sch)
    assert cv.check_effective(merged, sch, "nvidia", NVCT, False, False, keys) == []
    # Without the drop-in's keys the check fails on what containerd 1.7 would run.
    assert cv.check_effective(
        merged_like_containerd(effective, tomllib.loads(c.render_drop_in(
            sch, "nvidia", NVCT, False, False, c.effective_cri(effective, sch)
        )), sch),
        sch, "nvidia", NVCT, False, False, keys,
    ) == ["plugins.io.containerd.grpc.v1.cri.enable_cdi is False, expected True"]  # fmt: skip


def test_cdi_on_1_7_keeps_spec_dirs_the_config_has() -> None:
    effective = load(DEFAULT_17)
    effective["plugins"]["io.containerd.grpc.v1.cri"]["cdi_spec_dirs"] = ["/opt/cdi", "/etc/cdi"]
    keys, state, _ = c.cdi_settings(effective, schema((1, 7, 24), 2), (1, 7, 24), True)
    assert keys["cdi_spec_dirs"] == ["/opt/cdi", "/etc/cdi", "/var/run/cdi"]
    assert state["spec_dirs"] == keys["cdi_spec_dirs"]


def test_cdi_on_2_x_is_the_default_and_the_drop_in_stays_as_it_was() -> None:
    effective = load(DEFAULT_21)  # containerd 2.1.9's own default: enable_cdi = true
    sch = schema((2, 1, 9), 3)
    keys, state, warnings = c.cdi_settings(effective, sch, (2, 1, 9), True)
    assert (keys, warnings) == ({}, [])
    assert state == {
        "enabled": True,
        "spec_dirs": ["/etc/cdi", "/var/run/cdi"],
        "source": "containerd default",
    }
    assert c.render_drop_in(sch, "nvidia", NVCT, False, False, None, keys) == c.render_drop_in(
        sch, "nvidia", NVCT, False, False
    )


@pytest.mark.parametrize(
    ("change", "keys"),
    [
        (dict(enable_cdi=False), {"enable_cdi": True}),
        (dict(cdi_spec_dirs=["/etc/cdi"]), {"cdi_spec_dirs": ["/etc/cdi", "/var/run/cdi"]}),
        (
            dict(enable_cdi=False, cdi_spec_dirs=[]),
            {"enable_cdi": True, "cdi_spec_dirs": ["/etc/cdi", "/var/run/cdi"]},
        ),
    ],
)
def test_cdi_on_2_x_sets_only_what_the_config_turned_off(change: dict, keys: dict) -> None:
    effective = load(DEFAULT_21)
    effective["plugins"]["io.containerd.cri.v1.runtime"].update(change)
    sch = schema((2, 1, 9), 3)
    found, state, _ = c.cdi_settings(effective, sch, (2, 1, 9), True)
    assert found == keys
    assert state["enabled"] is True and state["source"] == "drop-in"
    text = c.render_drop_in(sch, "nvidia", NVCT, False, False, None, found)
    drop_in = tomllib.loads(text)
    assert c.toml_loads_builtin(text) == drop_in
    section = drop_in["plugins"]["io.containerd.cri.v1.runtime"]
    assert {k: v for k, v in section.items() if k != "containerd"} == keys
    merged = merged_like_containerd(effective, drop_in, sch)
    assert cv.check_effective(merged, sch, "nvidia", NVCT, False, False, found) == []


def test_cdi_is_not_available_on_1_6() -> None:
    effective = load(DEFAULT_16)
    assert "enable_cdi" not in effective["plugins"]["io.containerd.grpc.v1.cri"]
    keys, state, warnings = c.cdi_settings(effective, schema((1, 6, 20), 2), (1, 6, 20), True)
    assert keys == {} and state["enabled"] is False and state["source"] == "unsupported"
    assert len(warnings) == 1 and "containerd 1.6.20 has no CDI support" in warnings[0]
    assert "container_runtime_cdi" in warnings[0]


@pytest.mark.parametrize(
    ("path", "version", "enabled"),
    [(DEFAULT_17, (1, 7, 24), False), (DEFAULT_21, (2, 1, 9), True)],
)
def test_cdi_false_sets_nothing_and_reports_the_config(path: Path, version, enabled) -> None:
    effective = load(path)
    keys, state, warnings = c.cdi_settings(
        effective, schema(version, 2 if version[0] == 1 else 3), version, False
    )
    assert (keys, warnings) == ({}, [])
    assert state["enabled"] is enabled and state["source"] == "not managed (cdi false)"


def test_cri_disabled_is_found() -> None:
    effective = load(DEFAULT_16)
    sch = schema((1, 6, 20), 2)
    assert c.cri_disabled(effective, sch) == []
    effective["disabled_plugins"] = ["cri"]  # what Docker's containerd.io package ships
    assert c.cri_disabled(effective, sch) == ["cri"]


def test_minimal_main_config() -> None:
    for version, expected in (((1, 6, 20), 2), ((2, 1, 9), 3)):
        sch = c.choose_schema(version, None, False)
        data = tomllib.loads(c.minimal_main_config(sch, ENTRY))
        assert data == {"version": expected, "imports": [ENTRY]}


# --- imports as containerd resolves them ----------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("/etc/containerd/conf.d/*.toml", "/etc/containerd/conf.d/99-nvidia.toml", True),
        (
            "/etc/containerd/conf.d/*.toml",
            "/etc/containerd/conf.d/.hidden.toml",
            True,
        ),  # Go's * matches dotfiles
        (
            "/etc/containerd/conf.d/*.toml",
            "/etc/containerd/conf.d/sub/x.toml",
            False,
        ),  # never crosses /
        ("/etc/containerd/conf.d/*.toml", "/etc/containerd/config.d/99-nvidia.toml", False),
        ("/etc/containerd/conf.d/9?-*.toml", "/etc/containerd/conf.d/99-nvidia.toml", True),
        ("/etc/containerd/conf.d/[0-4]*.toml", "/etc/containerd/conf.d/99-nvidia.toml", False),
        ("/etc/containerd/conf.d/[^0-4]*.toml", "/etc/containerd/conf.d/99-nvidia.toml", True),
        ("/etc/containerd/conf.d/*", "/etc/containerd/conf.d/99-nvidia.toml", True),
    ],
)
def test_go_match(pattern: str, path: str, matches: bool) -> None:
    assert c.go_match(pattern, path) is matches


@pytest.mark.parametrize(
    ("entries", "imported"),
    [
        ([ENTRY], True),
        (["/etc/containerd/conf.d/99-nvidia.toml"], True),
        (["conf.d/*.toml"], True),  # relative to the main config's directory
        (["./conf.d/../conf.d/99-nvidia.toml"], True),
        (["/etc/containerd/config.d/*.toml"], False),
        ([], False),
    ],
)
def test_is_imported(entries: list[str], imported: bool) -> None:
    assert (
        c.is_imported(
            entries, "/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml"
        )
        is imported
    )


def test_expand_imports_in_containerd_order(tmp_path: Path) -> None:
    d = tmp_path / "conf.d"
    d.mkdir()
    for name in ("50-registry.toml", ".10-hidden.toml", "README.txt", "99-zz.toml"):
        (d / name).write_text("")
    (tmp_path / "site.toml").write_text("")
    main = str(tmp_path / "config.toml")
    ours = str(d / "99-nvidia.toml")
    entries = ["site.toml", str(d / "*.toml")]
    expected = [
        str(tmp_path / "site.toml"),
        str(d / ".10-hidden.toml"),
        str(d / "50-registry.toml"),
        ours,
        str(d / "99-zz.toml"),
    ]
    assert c.expand_imports(entries, main, ours) == expected
    with_copy = c.expand_imports(entries, main, ours, substitute="/tmp/scratch/99-nvidia.toml")
    assert with_copy[3] == "/tmp/scratch/99-nvidia.toml"
    assert ours not in c.expand_imports(entries, main, ours, include_drop_in=False)
    assert (
        c.expand_imports([str(d / "*.toml"), str(d / "50-registry.toml")], main, ours).count(
            str(d / "50-registry.toml")
        )
        == 1
    )


# --- the scratch containerd ---------------------------------------------------------------------


def test_parse_plugins_ls_real_outputs() -> None:
    ok16 = cv.parse_plugins_ls((DATA / "ctr-plugins-ls-containerd-1.6.20-cri-ok.txt").read_text())
    bad16 = cv.parse_plugins_ls(
        (DATA / "ctr-plugins-ls-containerd-1.6.20-cri-error-nvidia-only-drop-in.txt").read_text()
    )
    ok21 = cv.parse_plugins_ls((DATA / "ctr-plugins-ls-containerd-2.1.9-cri-ok.txt").read_text())

    def status(rows, ptype, pid):
        return [r["status"] for r in rows if (r["type"], r["id"]) == (ptype, pid)]

    assert len(ok16) == 38
    assert status(ok16, "io.containerd.grpc.v1", "cri") == ["ok"]
    assert status(ok16, "io.containerd.snapshotter.v1", "devmapper") == ["error"]
    assert status(bad16, "io.containerd.grpc.v1", "cri") == ["error"]
    for ptype, pid in cv.required_plugins((2, 1, 9)):
        assert status(ok21, ptype, pid) == ["ok"]
    assert cv.required_plugins((1, 6, 20)) == [("io.containerd.grpc.v1", "cri")]
    detail = (
        DATA / "ctr-plugins-ls-d-cri-containerd-1.6.20-cri-error-nvidia-only-drop-in.txt"
    ).read_text()
    assert "no corresponding runtime configured" in re.findall(r"Message:\s*(.*)", detail)[0]


def test_scratch_overrides_move_what_would_clash(tmp_path: Path) -> None:
    # containerd 2.1.9's default has NRI enabled on /var/run/nri/nri.sock: moved, nothing else.
    effective = load(DEFAULT_21)
    sch = schema((2, 1, 9), 3)
    data = tomllib.loads(cv.scratch_overrides(effective, sch, str(tmp_path)))
    assert data == {
        "version": 3,
        "plugins": {
            "io.containerd.nri.v1.nri": {
                "socket_path": str(tmp_path / "nri.sock"),
                "plugin_path": str(tmp_path / "nri-plugins"),
            }
        },
    }
    # 1.7.24 has NRI disabled: only the version line.
    assert tomllib.loads(
        cv.scratch_overrides(load(DEFAULT_17), schema((1, 7, 24), 2), str(tmp_path / "b"))
    ) == {"version": 2}


def test_scratch_overrides_on_1x_copy_whole_sections(tmp_path: Path) -> None:
    effective = load(DEFAULT_17)
    effective["plugins"]["io.containerd.nri.v1.nri"]["disable"] = False
    effective["metrics"]["address"] = "127.0.0.1:1338"
    effective["debug"]["address"] = "/run/containerd/debug.sock"
    effective["plugins"]["io.containerd.snapshotter.v1.devmapper"]["pool_name"] = "containerd-pool"
    sch = schema((1, 7, 24), 2)
    data = tomllib.loads(cv.scratch_overrides(effective, sch, str(tmp_path)))
    nri = data["plugins"]["io.containerd.nri.v1.nri"]
    assert nri["socket_path"] == str(tmp_path / "nri.sock")
    assert nri["plugin_config_path"] == "/etc/nri/conf.d"  # the rest of the section is kept
    assert data["metrics"]["address"] == "127.0.0.1:0"
    assert data["debug"]["address"] == str(tmp_path / "debug.sock")
    assert data["disabled_plugins"] == ["io.containerd.snapshotter.v1.devmapper"]
    assert "grpc" not in data  # no tcp_address was set


def test_scratch_overrides_fixed_stream_port_on_2x(tmp_path: Path) -> None:
    effective = load(DEFAULT_21)
    effective["plugins"]["io.containerd.nri.v1.nri"]["disable"] = True
    effective["plugins"]["io.containerd.grpc.v1.cri"]["stream_server_port"] = "10010"
    data = tomllib.loads(cv.scratch_overrides(effective, schema((2, 1, 9), 3), str(tmp_path)))
    assert data["plugins"] == {
        "io.containerd.grpc.v1.cri": {
            "stream_server_port": "0",
            "stream_server_address": "127.0.0.1",
        }
    }


# --- what runs on the target ------------------------------------------------------------------------


def test_toml_loads_falls_back_to_the_builtin_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """On Python 3.8-3.10 without python3-toml, the builtin reader answers (and says so)."""
    monkeypatch.setattr(toml_text, "_tomllib", None)
    monkeypatch.setattr(toml_text, "_toml_pkg", None)
    assert c.toml_parser_name() == "builtin"
    text = DEFAULT_21.read_text()
    assert c.toml_loads(text) == tomllib.loads(text)
    with pytest.raises(c.ContainerdConfigError, match="line 1"):
        c.toml_loads("a = \n", "x.toml")


@pytest.mark.parametrize(
    "relpath",
    [
        "plugins/module_utils/containerd.py",
        "plugins/module_utils/containerd_params.py",
        "plugins/module_utils/containerd_reset.py",
        "plugins/module_utils/containerd_validate.py",
        "plugins/module_utils/toml_text.py",
        "plugins/module_utils/docker_daemon.py",
        "plugins/modules/containerd_runtime.py",
        "plugins/modules/docker_runtime.py",
    ],
)
def test_target_code_is_python_3_8_syntax(repo_root: Path, relpath: str) -> None:
    import ast

    ast.parse((repo_root / relpath).read_text(), filename=relpath, feature_version=(3, 8))
