"""kubelet_config's action plugin: with pipelining it reads the node with one sh script and
answers on the controller when nothing changes; otherwise the module runs. Both must return
the same.

Real `ansible localhost -c local` runs on files under tmp (the options point at them): each
case runs once with `ansible_pipelining=true` and once with false, and the results must be
equal. The files are first merged by a module run, so that the compared runs have nothing to
change, except in the cases that must change something (then the piped run falls back to the
module and writes the same files). Every compared run gets, as the node's Python, a wrapper that
logs how it was started, so the tests see whether a piped run asked Python only `-c` (the
PyYAML check) or ran the module.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_gpu_modules import write
from tests.unit.test_kubelet_config_module import ARGS, DEFAULT_KUBELET, K3S_CONFIG, KUBEADM_CONFIG
from tests.unit.test_piped_facts import adhoc, comparable

LABELS = {"nvidia.com/gpu.present": "true"}
GATES = {"KubeletPodResourcesGet": True}


def python_wrapper(folder: Path) -> tuple[Path, Path]:
    """A Python for the node that logs its first argument (`module` when it reads the module
    from stdin, as a pipelined module run does) and runs this test's Python."""
    log = folder / "python.log"
    wrapper = write(
        folder / "py",
        f'#!/bin/sh\nprintf "%s\\n" "${{1:-module}}" >> {log}\nexec {sys.executable} "$@"\n',
    )
    wrapper.chmod(0o755)
    return wrapper, log


def one_run(
    tmp: Path, args: dict[str, Any], piped: bool, flags: tuple[str, ...], path_bin: Path | None
) -> dict[str, Any]:
    tmp.mkdir(parents=True)
    wrapper, log = python_wrapper(tmp)
    extra = ("-e", f"ansible_python_interpreter={wrapper}", *flags)
    done = adhoc(tmp, "kubelet_config", args, piped, *extra, path_bin=path_bin)
    done["python"] = log.read_text().splitlines() if log.exists() else []
    return done


def snapshot(files: list[Path]) -> dict[str, str | None]:
    return {str(f): f.read_text() if f.exists() else None for f in files}


@dataclass
class Case:
    """A case: the module's args and the flags of both compared runs; `setup` to merge the
    files first (a module run), so that the compared runs have nothing to change; the `files`
    a change writes (set back between the two runs, and compared after them); a folder put
    first on PATH."""

    args: dict[str, Any]
    flags: tuple[str, ...] = ()
    setup: bool = True
    files: tuple[Path, ...] = ()
    path_bin: Path | None = None

    def run(self, tmp: Path) -> dict[Any, Any]:
        if self.setup:
            merged = adhoc(
                tmp / "setup", "kubelet_config", self.args, False, path_bin=self.path_bin
            )
            assert merged["rc"] == 0, merged
        before = snapshot(list(self.files))
        out: dict[Any, Any] = {}
        for piped in (True, False):
            out[piped] = one_run(tmp / str(piped), self.args, piped, self.flags, self.path_bin)
            out[piped, "files"] = snapshot(list(self.files))
            for path, text in before.items():
                if text is None:
                    Path(path).unlink(missing_ok=True)
                else:
                    Path(path).write_text(text)
        return out


def fake_binary(path: Path, body: str) -> Path:
    """A test double of a kubelet, k3s or rke2 binary (this host has none)."""
    write(path, "#!/bin/sh\n" + body).chmod(0o755)
    return path


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[Any, Any]]:
    tmp = tmp_path_factory.mktemp("piped-kubelet")

    def kubeadm(name: str, **more: Any) -> dict[str, Any]:
        config = write(tmp / name / "var-lib-kubelet/config.yaml", KUBEADM_CONFIG)
        extra = write(tmp / name / "default-kubelet", DEFAULT_KUBELET)
        return dict(ARGS, config_path=str(config), extra_args_path=str(extra), **more)

    def k3s(name: str, **more: Any) -> dict[str, Any]:
        config = write(tmp / name / "k3s.yaml", K3S_CONFIG)
        return {"flavor": "k3s", "node_labels": LABELS, "config_path": str(config), **more}

    # What `kubelet --version` and `k3s --version` print (test doubles), and a kubelet that
    # cannot start.
    kubelet = fake_binary(tmp / "bin/kubelet", 'echo "Kubernetes v1.35.2"\n')
    broken = fake_binary(
        tmp / "bin/broken", 'echo "failed to load config: no such file" >&2\nexit 3\n'
    )
    path_bin = tmp / "path-bin"
    fake_binary(
        path_bin / "k3s", 'echo "k3s version v1.35.2+k3s1 (6da204df)"\necho "go version go1.22.6"\n'
    )
    # An extra-args file with Windows line ends that already has our label: no change, read
    # through universal newlines as the module reads it.
    crlf = write(tmp / "crlf/default-kubelet", "")
    crlf.write_bytes(
        b'# kubelet flags\r\nKUBELET_EXTRA_ARGS="--node-labels=nvidia.com/gpu.present=true"\r\n'
    )
    changing = kubeadm("change", backup=False)
    dropins = tmp / "dropin/kubelet.conf.d"
    table = {
        "kubeadm": Case(kubeadm("kubeadm")),
        "dropin": Case(kubeadm("dropin", kubelet_version="1.33", config_dir=str(dropins))),
        "k3s": Case(k3s("k3s", kubelet_version="v1.36.3+k3s1", feature_gates=GATES)),
        "rke2": Case(
            {
                "flavor": "rke2",
                "kubelet_version": "1.35",
                "settings": {"maxPods": 200},
                "config_dir": str(tmp / "rke2/conf.d"),
                "config_path": str(write(tmp / "rke2/config.yaml", "token: x\n")),
                "node_taints": ["nvidia.com/gpu=present:NoSchedule"],
            }
        ),
        "binary": Case(kubeadm("binary", kubelet_version=None, binary=str(kubelet))),
        "binary-differs": Case(kubeadm("differs", kubelet_version="1.34", binary=str(kubelet))),
        "binary-fails": Case(kubeadm("fails", binary=str(broken))),
        "auto-k3s": Case(
            k3s("auto", flavor="auto", feature_gates=GATES, extra_args_path=str(tmp / "none")),
            path_bin=path_bin,
        ),
        "crlf": Case(
            {"flavor": "kubeadm", "node_labels": LABELS, "extra_args_path": str(crlf)},
            setup=False,
        ),
        "validate": Case(
            {"kubelet_version": "1.35", "feature_gates": GATES, "validate_only": True},
            setup=False,
        ),
        "check-diff": Case(kubeadm("check-diff"), ("--check", "--diff")),
        "bad-label": Case(kubeadm("bad", node_labels={"kubernetes.io/role": "gpu"}), setup=False),
        "bad-flavor": Case({"flavor": "minikube"}, setup=False),
        "change": Case(
            changing,
            setup=False,
            files=(Path(changing["config_path"]), Path(changing["extra_args_path"])),
        ),
        "change-check": Case(kubeadm("change-check"), ("--check", "--diff"), setup=False),
        "home": Case(k3s("home", binary="~/no-such/k3s")),
    }
    # The module's record of what it changed goes beside each case's files, never to /etc.
    for name, case in table.items():
        case.args.setdefault("record_path", str(tmp / "records" / f"{name}.fact"))
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = pool.map(lambda item: item[1].run(tmp / item[0]), table.items())
        return dict(zip(table, done, strict=True))


ANSWERED = [
    "kubeadm",
    "dropin",
    "k3s",
    "rke2",
    "binary",
    "binary-differs",
    "binary-fails",
    "auto-k3s",
    "crlf",
    "validate",
    "check-diff",
]
MODULE_RUNS = ["bad-label", "bad-flavor", "change", "change-check", "home"]


@pytest.mark.parametrize("case", ANSWERED + MODULE_RUNS)
def test_piped_equals_the_module(cases: dict[str, Any], case: str) -> None:
    piped, module = cases[case][True], cases[case][False]
    assert piped["rc"] == module["rc"], (piped, module)
    assert comparable(piped["result"]) == comparable(module["result"])
    assert cases[case][True, "files"] == cases[case][False, "files"]


@pytest.mark.parametrize("case", ANSWERED)
def test_nothing_to_change_is_answered_without_the_module(cases: dict[str, Any], case: str) -> None:
    # The node's Python ran only the PyYAML check; the module ran in the unpiped run.
    assert cases[case][True]["python"] == ["-c"]
    assert cases[case][True]["result"]["changed"] is False
    assert "AnsiballZ" in cases[case][False]["python"][0]


@pytest.mark.parametrize("case", MODULE_RUNS)
def test_anything_else_runs_the_module(cases: dict[str, Any], case: str) -> None:
    assert "module" in cases[case][True]["python"]


def test_cases_say_what_they_should(cases: dict[str, Any]) -> None:
    def result(name: str) -> dict[str, Any]:
        return dict(cases[name][True]["result"])

    assert result("binary")["version_source"] == "binary"
    assert result("binary")["kubelet_version"] == "1.35"
    assert "--version says 'Kubernetes v1.35.2'" in result("binary-differs")["warnings"][0]
    (warning,) = result("binary-fails")["warnings"]
    assert warning.endswith("/bin/broken --version exited 3: failed to load config: no such file")
    auto = result("auto-k3s")
    assert (auto["flavor"], auto["version_source"], auto["kubelet_found"]) == (
        "k3s",
        "binary",
        True,
    )
    assert result("validate")["python_yaml"] is True
    assert result("check-diff")["diff"] == []
    assert "kubernetes.io namespace" in result("bad-label")["msg"]
    assert "minikube" in result("bad-flavor")["msg"]
    # The files were set back between the two runs: each made the change itself.
    for piped in (True, False):
        assert cases["change"][piped]["result"]["changed"] is True
        config, extra = cases["change"][piped, "files"].values()
        assert "KubeletPodResourcesGet: true" in config and "nvidia.com/gpu.present" in extra
    check = result("change-check")
    assert [d["after_header"] for d in check["diff"]] == check["files"] != []
