"""The kubelet of a node that does not run one, stood in for on the real control plane.

Tests that register a Node (``controlplane.register_node``) or name a testbed node that runs
no kubelet still meet every real controller: the scheduler binds, the DaemonSet controller
makes pods, evictions and deletions only mark a bound pod (its kubelet removes it), the node
lifecycle controller marks a node whose heartbeat stops unreachable. What only that node's
kubelet would write is written here, through the API as a kubelet writes it, and nothing else:

- a pod's status (phase, container states), through the pods' status subresource;
- the node's heartbeat (its Ready condition), through the nodes' status subresource;
- the end of a deletion: a pod bound to one of these nodes and marked for deletion is removed
  (deleted with a grace period of 0, as the kubelet does once its containers stopped);
- a container's log, served to the API server on the node's kubelet port (``LogEndpoint``).
"""

from __future__ import annotations

import http.server
import itertools
import ssl
import threading
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote, urlsplit

from tests.cluster.pki import PKI


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def write_pod_status(core: Any, name: str, namespace: str, phase: str = "Running") -> None:
    """The status the kubelet writes for a pod whose containers run (or ended, ``phase``)."""
    pod = core.read_namespaced_pod(name, namespace)
    running = phase == "Running"
    state: dict[str, Any] = (
        {"running": {"startedAt": now()}}
        if running
        else {"terminated": {"exitCode": 0 if phase == "Succeeded" else 1, "reason": phase}}
    )
    statuses = [
        {
            "name": container.name,
            "ready": running,
            "restartCount": 0,
            "image": container.image,
            "imageID": "",
            "started": running,
            "state": state,
        }
        for container in pod.spec.containers
    ]
    ready = "True" if running else "False"
    core.patch_namespaced_pod_status(
        name,
        namespace,
        {
            "status": {
                "phase": phase,
                "startTime": now(),
                "conditions": [
                    {"type": kind, "status": ready, "lastTransitionTime": now()}
                    for kind in ("Initialized", "ContainersReady", "Ready")
                ],
                "containerStatuses": statuses,
            }
        },
    )


def heartbeat(core: Any, node: str) -> None:
    """The kubelet's status update: the node Ready, as of now."""
    stamp = now()
    core.patch_node_status(
        node,
        {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": stamp,
                        "lastTransitionTime": stamp,
                    }
                ]
            }
        },
    )


def finish_deletions(core: Any, nodes: Iterable[str]) -> list[str]:
    """Remove every pod bound to one of ``nodes`` that is marked for deletion (evicted, deleted,
    or its owner gone); ``namespace/name`` of each."""
    done = []
    for node in nodes:
        pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
        for pod in pods:
            if pod.metadata.deletion_timestamp is None:
                continue
            try:
                core.delete_namespaced_pod(
                    pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
                )
            except Exception as exc:  # gone already: nothing to finish
                if getattr(exc, "status", None) != 404:
                    raise
                continue
            done.append(f"{pod.metadata.namespace}/{pod.metadata.name}")
    return done


class KubeletStandIn:
    """While entered: every half second, finishes the deletions of pods on ``nodes``; every 5 s
    (a kubelet's is 10 s, the node lifecycle controller's grace 40 s), renews the heartbeat of
    ``heartbeat_nodes``. ``removed`` lists the pods it removed, in order."""

    def __init__(
        self, api_client: Any, nodes: Iterable[str], heartbeat_nodes: Iterable[str] = ()
    ) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.nodes = list(nodes)
        self.heartbeat_nodes = list(heartbeat_nodes)
        self.removed: list[str] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        for turn in itertools.count():
            try:
                if turn % 10 == 0:
                    for node in self.heartbeat_nodes:
                        heartbeat(self.core, node)
                self.removed += finish_deletions(self.core, self.nodes)
            except Exception as exc:  # kept for the test to show; the loop goes on
                self.errors.append(f"{type(exc).__name__}: {exc}")
            if self.stop.wait(0.5):
                return

    def __enter__(self) -> KubeletStandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        # What was marked in the last half second is finished too.
        self.removed += finish_deletions(self.core, self.nodes)


class LogEndpoint:
    """The kubelet's HTTPS endpoint as the API server asks it for a container's log
    (``GET /containerLogs/<namespace>/<pod>/<container>``), on a loopback port; ``logs`` maps
    ``namespace/pod/container`` to the text. The API server (started without
    --kubelet-certificate-authority) does not verify the kubelet's serving certificate; this
    one is issued by the test CA all the same. Register the node with address 127.0.0.1 and
    ``daemonEndpoints.kubeletEndpoint.Port`` = ``port``."""

    def __init__(self, pki: PKI) -> None:
        self.logs: dict[str, str] = {}
        self.asked: list[str] = []
        pair = pki.issue("standin-kubelet", "kubelet-standin", server=True, ips=("127.0.0.1",))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(pair.cert), str(pair.key))
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = [unquote(p) for p in urlsplit(self.path).path.split("/") if p]
                key = "/".join(parts[1:4]) if parts[:1] == ["containerLogs"] else ""
                endpoint.asked.append(self.path)
                text = endpoint.logs.get(key)
                body = (text if text is not None else f"no log for {key or self.path}").encode()
                self.send_response(200 if text is not None else 404)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LogEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
