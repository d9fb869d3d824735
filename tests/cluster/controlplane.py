"""Start and stop a real Kubernetes control plane on loopback: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler, the programs tests/cluster/build.py builds from the
official Go modules.

Nothing here plays Kubernetes: the API server runs its whole admission chain (NamespaceLifecycle,
LimitRanger, ServiceAccount, PodSecurity, ResourceQuota, NodeRestriction, ...), RBAC and Node
authorization; the controller manager runs every default controller (quota usage, garbage
collection, namespaces, service accounts and their tokens, deployments, daemonsets, disruption
budgets, node lifecycle, pod GC); the scheduler binds pods. Clients authenticate with
certificates from one test CA (tests/cluster/pki.py).

Load as a pytest plugin (``pytest_plugins = ["tests.cluster.controlplane"]``) for the session
fixture ``kube_cluster``, or call :func:`start` / :meth:`KubeCluster.stop` directly
(``python -m tests.cluster.run``).
"""

from __future__ import annotations

import ipaddress
import json
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
import yaml

from tests.cluster.pki import PKI, Pair
from tests.processes import die_with_parent, free_port, tail

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.py"
START_TIMEOUT_S = 120.0
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
CLUSTER_CIDR = "10.244.0.0/16"


class ClusterError(RuntimeError):
    """The control plane could not be built or started; the message carries the log's tail."""


def build(kubelets: bool = False) -> dict[str, Any]:
    """Build (or find cached) binaries; returns build.py's JSON result (with ``kubelets``, also
    the older releases' kubelets, under "kubelets")."""
    proc = subprocess.run(
        [sys.executable, str(BUILD_SCRIPT), "--json", *(["--kubelets"] if kubelets else [])],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise ClusterError(
            f"{BUILD_SCRIPT} failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write_kubeconfig(path: Path, url: str, ca: Path, user: str, pair: Pair) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "kubegpu-test", "cluster": {"server": url, "certificate-authority": str(ca)}}
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate": str(pair.cert), "client-key": str(pair.key)},
            }
        ],
        "contexts": [{"name": user, "context": {"cluster": "kubegpu-test", "user": user}}],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)
    return path


def register_node(
    core: Any, name: str, labels: dict[str, str], resources: dict[str, str], address: str = ""
) -> None:
    """A Node as a kubelet's registration writes it, Ready, for a test that has no kubelet for
    it: nothing renews its heartbeat, so the node lifecycle controller marks it unreachable after
    its grace period (about 40 s)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status: dict[str, Any] = {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ],
    }
    if address:
        status["addresses"] = [{"type": "InternalIP", "address": address}]
    core.create_node(
        {
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
            "status": status,
        }
    )


@dataclass
class KubeCluster:
    """A running control plane; ``kubeconfig`` is an administrator's (system:masters)."""

    workdir: Path
    kubeconfig: Path
    url: str
    version: str
    ca_file: Path
    pki: PKI
    procs: dict[str, subprocess.Popen[bytes]]
    binaries: dict[str, str]
    _clients: list[Any] = field(default_factory=list)

    def client(self) -> Any:
        """A new ``kubernetes.client.ApiClient`` for this cluster, as the administrator."""
        from kubernetes import config

        api_client = config.new_client_from_config(config_file=str(self.kubeconfig))
        self._clients.append(api_client)
        return api_client

    def kubeconfig_for(self, user: str, organization: str | None = None) -> Path:
        """A kubeconfig for a user the cluster authenticates by certificate (RBAC decides)."""
        stem = "user-" + "".join(c if c.isalnum() else "-" for c in user)
        pair = self.pki.issue(stem, user, organization, client=True)
        return write_kubeconfig(
            self.workdir / f"{stem}.kubeconfig", self.url, self.ca_file, user, pair
        )

    def node_files(self, node: str) -> dict[str, str]:
        """What a kubelet on ``node`` needs to join, by path on the node: the CA, its client
        certificate as ``system:node:<node>`` in ``system:nodes``, and its kubeconfig (the
        kubeadm layout)."""
        pair = self.pki.issue(f"node-{node}", f"system:node:{node}", "system:nodes", client=True)
        ca, cert, key = (
            "/etc/kubernetes/pki/ca.crt",
            "/var/lib/kubelet/pki/kubelet-client.crt",
            "/var/lib/kubelet/pki/kubelet-client.key",
        )
        kubeconfig = write_kubeconfig(
            self.workdir / f"node-{node}.kubeconfig",
            self.url,
            Path(ca),
            f"system:node:{node}",
            Pair(Path(cert), Path(key)),
        )
        return {
            ca: self.ca_file.read_text(),
            cert: pair.cert.read_text(),
            key: pair.key.read_text(),
            "/etc/kubernetes/kubelet.conf": kubeconfig.read_text(),
        }

    def kubectl(
        self, *args: str, kubeconfig: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.binaries["kubectl"], f"--kubeconfig={kubeconfig or self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            check=False,
        )

    def remove(
        self, namespaces: tuple[str, ...] = (), nodes: tuple[str, ...] = (), timeout_s: float = 120
    ) -> None:
        """Remove what a test made on the session's shared cluster: its Nodes (registered with no
        kubelet) and its namespaces, and wait until the namespaces are gone.

        A pod bound to a node without a kubelet never finishes terminating: nothing confirms
        its containers stopped, and pod GC takes it only after the node is gone and a
        quarantine. Such pods (also the ones a DaemonSet made for the test's nodes in other
        namespaces) are force-deleted, as an operator does for a node gone for good, so the
        namespace does not stay Terminating. On a timeout the error names each namespace's
        conditions, the pods left and the nodes."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        core = client.CoreV1Api(self.client())

        def quietly(call: Any, *args: Any, **kwargs: Any) -> None:
            try:
                call(*args, **kwargs)
            except ApiException as exc:
                # 404: gone already; 409: a namespace already terminating.
                if exc.status not in (404, 409):
                    raise

        def force_delete(pods: list[Any]) -> None:
            for pod in pods:
                quietly(
                    core.delete_namespaced_pod,
                    pod.metadata.name,
                    pod.metadata.namespace,
                    grace_period_seconds=0,
                )

        for node in nodes:
            force_delete(
                core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
            )
            quietly(core.delete_node, node)
        for namespace in namespaces:
            quietly(core.delete_namespace, namespace)

        def left() -> list[str]:
            present = []
            for namespace in namespaces:
                try:
                    core.read_namespace(namespace)
                except ApiException as exc:
                    if exc.status == 404:
                        continue
                    raise
                present.append(namespace)
                # Every pod of a test namespace is bound to a kubelet-less node or to none.
                force_delete(core.list_namespaced_pod(namespace).items)
            return present

        deadline = time.monotonic() + timeout_s
        while left():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"namespaces {', '.join(namespaces)} gone: not within {timeout_s:.0f} s; "
                    + self._leftovers(core, namespaces, nodes)
                )
            time.sleep(0.5)

    @staticmethod
    def _leftovers(core: Any, namespaces: tuple[str, ...], nodes: tuple[str, ...]) -> str:
        from kubernetes.client.exceptions import ApiException

        lines = []
        for namespace in namespaces:
            try:
                status = core.read_namespace(namespace).status
            except ApiException:
                continue
            conditions = [
                f"{c.type}={c.status} ({c.message})"
                for c in status.conditions or []
                if c.status == "True"
            ]
            pods = [
                f"{p.metadata.name} on {p.spec.node_name or '(unbound)'}"
                for p in core.list_namespaced_pod(namespace).items
            ]
            lines.append(f"{namespace}: {status.phase}, {conditions}, pods {pods}")
        still = {n.metadata.name for n in core.list_node().items} & set(nodes)
        lines.append(f"nodes not deleted: {sorted(still)}")
        return "; ".join(lines)

    def rss_kib(self) -> dict[str, int]:
        out = {}
        for name, proc in self.procs.items():
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    out[name] = int(line.split()[1])
        return out

    def stop(self) -> None:
        """Stop every process, the API server's clients first, etcd last."""
        try:
            for api_client in self._clients:
                api_client.close()
        finally:
            self._clients.clear()
            _stop_all(list(self.procs.values())[::-1])


def _stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    """One after the other (clients before the API server, etcd last): SIGTERM, then SIGKILL."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def _die_with_parent() -> None:
    # SIGKILL: an API server whose etcd went with the same parent never finishes a SIGTERM.
    die_with_parent(signal.SIGKILL)


def _spawn(name: str, argv: list[str], workdir: Path) -> subprocess.Popen[bytes]:
    with open(workdir / f"{name}.log", "ab") as out:
        return subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )


def _wait(
    what: str,
    probe: Any,
    procs: dict[str, subprocess.Popen[bytes]],
    workdir: Path,
    deadline: float,
) -> None:
    last = ""
    while time.monotonic() < deadline:
        for name, proc in procs.items():
            if proc.poll() is not None:
                raise ClusterError(
                    f"{name} exited with {proc.returncode}:\n{tail(workdir / f'{name}.log')}"
                )
        try:
            if probe():
                return
        except Exception as exc:  # any failure of a probe means "not yet"
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(0.1)
    raise ClusterError(f"{what} not ready in {START_TIMEOUT_S:.0f} s ({last})")


def _get(url: str, context: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, context=context, timeout=5) as resp:
        return resp.status, resp.read()


def start(
    workdir: Path, binaries: dict[str, Any] | None = None, address: str = "127.0.0.1"
) -> KubeCluster:
    """Start the control plane with its data in ``workdir``, on free ports.

    The API server listens on ``address``: loopback by default, or a testbed bridge's address
    for kubelets on the nodes (then it is also the ``kubernetes`` Service's endpoint). etcd and
    the controllers stay on loopback.
    """
    loopback = ipaddress.ip_address(address).is_loopback
    built = binaries or build()
    bins: dict[str, str] = built["bin"]
    workdir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    pki = PKI(workdir / "pki")
    port = free_port()
    url = f"https://{address}:{port}"
    serving = pki.issue(
        "apiserver",
        "kube-apiserver",
        server=True,
        dns=(
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ),
        ips=tuple(dict.fromkeys(("127.0.0.1", address, SERVICE_IP))),
    )
    kubelet_client = pki.issue(
        "apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters", client=True
    )
    sa = pki.service_account_keys()
    admin = write_kubeconfig(
        workdir / "admin.kubeconfig",
        url,
        pki.ca.cert,
        "kubegpu-test-admin",
        pki.issue("admin", "kubegpu-test-admin", "system:masters", client=True),
    )
    kcm = write_kubeconfig(
        workdir / "controller-manager.kubeconfig",
        url,
        pki.ca.cert,
        "system:kube-controller-manager",
        pki.issue("controller-manager", "system:kube-controller-manager", client=True),
    )
    scheduler = write_kubeconfig(
        workdir / "scheduler.kubeconfig",
        url,
        pki.ca.cert,
        "system:kube-scheduler",
        pki.issue("scheduler", "system:kube-scheduler", client=True),
    )
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        etcd_port, peer_port = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        procs["etcd"] = _spawn(
            "etcd",
            [
                bins["etcd"],
                "--name=default",
                f"--data-dir={workdir / 'etcd-data'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            workdir,
        )
        _wait(
            "etcd",
            lambda: json.loads(_get(f"{etcd_url}/health")[1]).get("health") == "true",
            procs,
            workdir,
            deadline,
        )
        procs["kube-apiserver"] = _spawn(
            "kube-apiserver",
            [
                bins["kube-apiserver"],
                f"--etcd-servers={etcd_url}",
                f"--bind-address={address}",
                f"--advertise-address={address}",
                # Loopback cannot be the kubernetes Service's endpoint: no reconciler then.
                *(["--endpoint-reconciler-type=none"] if loopback else []),
                f"--secure-port={port}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={pki.ca.cert}",
                f"--kubelet-client-certificate={kubelet_client.cert}",
                f"--kubelet-client-key={kubelet_client.key}",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                f"--service-account-key-file={sa.cert}",
                f"--service-account-signing-key-file={sa.key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                "--allow-privileged=true",
                "--profiling=false",
                f"--cert-dir={workdir / 'apiserver-certs'}",
            ],
            workdir,
        )
        context = ssl.create_default_context(cafile=str(pki.ca.cert))
        _wait(
            "kube-apiserver /readyz",
            lambda: _get(f"{url}/readyz", context)[0] == 200,
            procs,
            workdir,
            deadline,
        )
        procs["kube-controller-manager"] = _spawn(
            "kube-controller-manager",
            [
                bins["kube-controller-manager"],
                f"--kubeconfig={kcm}",
                f"--authentication-kubeconfig={kcm}",
                f"--authorization-kubeconfig={kcm}",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={sa.key}",
                f"--root-ca-file={pki.ca.cert}",
                f"--cluster-signing-cert-file={pki.ca.cert}",
                f"--cluster-signing-key-file={pki.ca.key}",
                "--allocate-node-cidrs=true",
                f"--cluster-cidr={CLUSTER_CIDR}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--controllers=*,bootstrapsigner,tokencleaner",
            ],
            workdir,
        )
        procs["kube-scheduler"] = _spawn(
            "kube-scheduler",
            [
                bins["kube-scheduler"],
                f"--kubeconfig={scheduler}",
                f"--authentication-kubeconfig={scheduler}",
                f"--authorization-kubeconfig={scheduler}",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--leader-elect=false",
            ],
            workdir,
        )
        cluster = KubeCluster(
            workdir=workdir,
            kubeconfig=admin,
            url=url,
            version=built["kubernetes_version"],
            ca_file=pki.ca.cert,
            pki=pki,
            procs=procs,
            binaries=bins,
        )
        # The controller manager is up once its service-account controller has made `default`.
        _wait(
            "kube-controller-manager (the default service account)",
            lambda: (
                cluster.kubectl("get", "serviceaccount", "default", "-n", "default").returncode == 0
            ),
            procs,
            workdir,
            deadline,
        )
    except BaseException:
        _stop_all(list(procs.values())[::-1])
        raise
    return cluster


# --------------------------------------------------------------------------- pytest plugin


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """A running control plane for the session; yields its :class:`KubeCluster`."""
    try:
        cluster = start(tmp_path_factory.mktemp("cluster"))
    except ClusterError as exc:
        pytest.fail(f"the test control plane did not start: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()
