"""kubegpu.gpu's Kubernetes client (module_utils/cluster_api.py) against a plain HTTP server on
loopback that answers as an API server does while it is not ready for a kind: 429 with
Retry-After, the answer the real kube-apiserver gave a prune that listed NodeFeatureGroups just
after their CRD was made ("storage is (re)initializing")."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_api

PATH = "/apis/nfd.k8s-sigs.io/v1alpha1/nodefeaturegroups"
UNREADY = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": "storage is (re)initializing",
    "reason": "TooManyRequests",
    "code": 429,
}


class Server:
    """Answers each request with the next of ``answers`` (status, headers); then 200 and an
    empty list. Records the methods and paths it was sent."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, dict[str, str]]] = []
        self.seen: list[tuple[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                server.seen.append((self.command, self.path.split("?")[0]))
                status, headers = server.answers.pop(0) if server.answers else (200, {})
                body = json.dumps(UNREADY if status != 200 else {"items": []}).encode()
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture
def server() -> Iterator[Server]:
    served = Server()
    yield served
    served.httpd.shutdown()


@pytest.fixture
def api(server: Server, tmp_path: Path) -> Iterator[cluster_api.ClusterApi]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server.url}}],
                "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    client = cluster_api.ClusterApi(str(kubeconfig), timeout=5)
    yield client
    client.close()


def test_a_request_turned_away_with_retry_after_is_sent_again(
    api: cluster_api.ClusterApi, server: Server
) -> None:
    server.answers = [(429, {"Retry-After": "0"}), (503, {"Retry-After": "0"})]
    assert api.list(PATH) == []
    assert server.seen == [("GET", PATH)] * 3
    server.seen.clear()
    server.answers = [(429, {"Retry-After": "0"})]
    assert api.delete(PATH + "/x") is True
    assert server.seen == [("DELETE", PATH + "/x")] * 2


def test_without_retry_after_or_past_the_limit_the_servers_answer_is_the_error(
    api: cluster_api.ClusterApi, server: Server
) -> None:
    server.answers = [(503, {})]
    with pytest.raises(cluster_api.ClusterApiError, match=r"^GET .*: storage is \(re\)init"):
        api.list(PATH)
    assert len(server.seen) == 1
    server.seen.clear()
    server.answers = [(429, {"Retry-After": "0"})] * (cluster_api.MAX_RETRIES + 1)
    with pytest.raises(cluster_api.ClusterApiError) as raised:
        api.list(PATH)
    assert raised.value.status == 429
    assert len(server.seen) == cluster_api.MAX_RETRIES + 1


@pytest.mark.parametrize(
    ("status", "header", "wait"),
    [
        (429, "1", 1),
        (503, "2", 2),
        (500, "0", 0),
        (429, "600", cluster_api.MAX_RETRY_WAIT_S),
        (429, "soon", None),
        (429, None, None),
        (404, "1", None),
        (409, "1", None),
    ],
)
def test_retry_after_is_read_only_where_client_go_reads_it(
    status: int, header: str | None, wait: int | None
) -> None:
    class Answer(Exception):
        def __init__(self) -> None:
            self.status = status
            self.headers = {} if header is None else {"Retry-After": header}

    assert cluster_api.retry_after(Answer()) == wait
