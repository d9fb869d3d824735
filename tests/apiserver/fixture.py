"""Start and stop the test Kubernetes API server (etcd + kubegpu-test-apiserver) on loopback.

Load as a pytest plugin (``pytest_plugins = ["tests.apiserver.fixture"]``) to get the session
fixture ``kube_apiserver``, or call :func:`start` / :meth:`KubeAPIServer.stop` directly (the demo
CLI ``python -m tests.apiserver.run`` does).

The server is a test double for a cluster's control plane: real upstream API machinery on a real
etcd, but no controllers, scheduler or kubelets. Tests play those by writing status; the
``play_kubelet_*`` helpers here do the common cases and are named for what they stand in for.
"""

from __future__ import annotations

import base64
import json
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.processes import die_with_parent, free_port, tail

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.py"
START_TIMEOUT_S = 60.0


class APIServerError(RuntimeError):
    """The server could not be built or started; the message carries the log's tail."""


def build() -> dict[str, Any]:
    """Build (or find cached) binaries; returns build.py's JSON result."""
    proc = subprocess.run(
        [sys.executable, str(BUILD_SCRIPT), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise APIServerError(
            f"{BUILD_SCRIPT} failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


@dataclass
class KubeAPIServer:
    """A running etcd + API server pair; ``kubeconfig`` is what clients use."""

    workdir: Path
    kubeconfig: Path
    url: str
    version: str
    etcd: subprocess.Popen[bytes]
    apiserver: subprocess.Popen[bytes]
    ca_file: Path
    _clients: list[Any] = field(default_factory=list)

    def client(self) -> Any:
        """A new ``kubernetes.client.ApiClient`` for this server."""
        from kubernetes import config

        api_client = config.new_client_from_config(config_file=str(self.kubeconfig))
        self._clients.append(api_client)
        return api_client

    def pids(self) -> dict[str, int]:
        return {"etcd": self.etcd.pid, "apiserver": self.apiserver.pid}

    def rss_kib(self) -> dict[str, int]:
        """Resident memory of each process, from /proc (KiB)."""
        out = {}
        for name, pid in self.pids().items():
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    out[name] = int(line.split()[1])
        return out

    def stop(self) -> None:
        """Stop the server, then etcd, by PID: SIGTERM, then SIGKILL after 10 s."""
        try:
            for api_client in self._clients:
                api_client.close()
        finally:
            self._clients.clear()
            for proc in (self.apiserver, self.etcd):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait(timeout=10)

    # ----------------------------------------------------------------- playing the kubelet

    def play_kubelet_finish_deletions(self, namespace: str | None = None) -> list[str]:
        """Play the kubelet: delete, with a grace period of 0, every pod marked for deletion.

        Pods bound to a node are only marked (deletionTimestamp) when deleted or evicted; a real
        kubelet then stops them and removes them. Returns ``namespace/name`` of pods removed.
        """
        from kubernetes import client

        core = client.CoreV1Api(self.client())
        pods = (
            core.list_namespaced_pod(namespace) if namespace else core.list_pod_for_all_namespaces()
        )
        done = []
        for pod in pods.items:
            if pod.metadata.deletion_timestamp is None:
                continue
            core.delete_namespaced_pod(
                pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
            )
            done.append(f"{pod.metadata.namespace}/{pod.metadata.name}")
        return done


def _wait_ready(
    url: str, ca_file: Path, procs: dict[str, tuple[subprocess.Popen[bytes], Path]], deadline: float
) -> None:
    context = ssl.create_default_context(cafile=str(ca_file))
    last = ""
    while time.monotonic() < deadline:
        for name, (proc, log) in procs.items():
            if proc.poll() is not None:
                raise APIServerError(f"{name} exited with {proc.returncode}:\n{tail(log)}")
        try:
            with urllib.request.urlopen(f"{url}/readyz", context=context, timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        time.sleep(0.1)
    raise APIServerError(f"{url}/readyz not ready in {START_TIMEOUT_S:.0f} s ({last})")


def _start_etcd(
    etcd: str, workdir: Path, deadline: float, started: list[subprocess.Popen[bytes]]
) -> tuple[subprocess.Popen[bytes], str]:
    log = workdir / "etcd.log"
    for _attempt in range(3):
        shutil.rmtree(workdir / "etcd-data", ignore_errors=True)
        client_port, peer_port = free_port(), free_port()
        client_url = f"http://127.0.0.1:{client_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [
                    etcd,
                    "--name=default",
                    f"--data-dir={workdir / 'etcd-data'}",
                    f"--listen-client-urls={client_url}",
                    f"--advertise-client-urls={client_url}",
                    f"--listen-peer-urls={peer_url}",
                    f"--initial-advertise-peer-urls={peer_url}",
                    f"--initial-cluster=default={peer_url}",
                    "--unsafe-no-fsync",
                    "--log-level=warn",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        started.append(proc)
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{client_url}/health", timeout=2) as resp:
                    if json.loads(resp.read()).get("health") == "true":
                        return proc, client_url
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.05)
        if proc.poll() is None:
            raise APIServerError(f"etcd not healthy in {START_TIMEOUT_S:.0f} s:\n{tail(log)}")
        if "address already in use" not in tail(log):
            break
    raise APIServerError(f"etcd exited with {proc.returncode}:\n{tail(log)}")


def start(workdir: Path, binaries: dict[str, Any] | None = None) -> KubeAPIServer:
    """Start etcd (data in ``workdir``) and the API server on free loopback ports."""
    binaries = binaries or build()
    workdir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    kubeconfig = workdir / "kubeconfig"
    log = workdir / "apiserver.log"
    started: list[subprocess.Popen[bytes]] = []
    kubeconfig.unlink(missing_ok=True)  # a --workdir reused from an earlier run
    try:
        etcd, etcd_url = _start_etcd(binaries["etcd"], workdir, deadline, started)
        with open(log, "ab") as out:
            apiserver = subprocess.Popen(
                [
                    binaries["apiserver"],
                    f"--etcd-servers={etcd_url}",
                    "--bind-address=127.0.0.1",
                    "--secure-port=0",
                    f"--cert-dir={workdir / 'certs'}",
                    f"--kubeconfig-out={kubeconfig}",
                    "--v=1",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        started.append(apiserver)
        procs = {"etcd": (etcd, workdir / "etcd.log"), "apiserver": (apiserver, log)}
        while not kubeconfig.exists():
            if apiserver.poll() is not None:
                raise APIServerError(f"apiserver exited with {apiserver.returncode}:\n{tail(log)}")
            if time.monotonic() > deadline:
                raise APIServerError(
                    f"no kubeconfig written in {START_TIMEOUT_S:.0f} s:\n{tail(log)}"
                )
            time.sleep(0.05)
        url, ca_file = _read_kubeconfig(kubeconfig, workdir)
        _wait_ready(url, ca_file, procs, deadline)
    except BaseException:
        # Also on KeyboardInterrupt/SystemExit: never leave a half-started pair behind.
        for proc in reversed(started):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        raise
    return KubeAPIServer(
        workdir=workdir,
        kubeconfig=kubeconfig,
        url=url,
        version=binaries["kubernetes_version"],
        etcd=etcd,
        apiserver=apiserver,
        ca_file=ca_file,
    )


def _read_kubeconfig(kubeconfig: Path, workdir: Path) -> tuple[str, Path]:
    import yaml

    doc = yaml.safe_load(kubeconfig.read_text())
    cluster = doc["clusters"][0]["cluster"]
    ca_file = workdir / "ca.crt"
    ca_file.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    return cluster["server"], ca_file


# --------------------------------------------------------------------------- pytest plugin


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "apiserver: needs the test Kubernetes API server (tests/apiserver)"
    )


@pytest.fixture(scope="session")
def kube_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    """A running test API server for the session; yields its :class:`KubeAPIServer`."""
    try:
        server = start(tmp_path_factory.mktemp("apiserver"))
    except APIServerError as exc:
        pytest.fail(f"the test API server did not start: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()
