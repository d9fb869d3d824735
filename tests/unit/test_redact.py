"""module_utils/redact.py: the values of secret settings never reach a diff."""

from __future__ import annotations

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils.redact import (
    is_secret_key,
    redact_diff,
    redact_text,
)


@pytest.mark.parametrize(
    ("line", "redacted"),
    [
        ("token: K10abc::server:xyz", "token: <redacted>"),
        ('agent-token: "xyz"', 'agent-token: "<redacted>"'),
        ('  password = "hunter2"', '  password = "<redacted>"'),
        ("  identitytoken = 'tok'", "  identitytoken = '<redacted>'"),
        ('  auth = "dXNlcjpwYXNz"', '  auth = "<redacted>"'),
        ('    "password": "x",', '    "password": "<redacted>",'),
        ("  - client_secret: abc", "  - client_secret: <redacted>"),
        ("apiKey: abc123", "apiKey: <redacted>"),
        ("REGISTRY_PASSWORD=abc", "REGISTRY_PASSWORD=<redacted>"),
        (
            "datastore-endpoint: postgres://k3s:pw@db:5432/k3s",
            "datastore-endpoint: postgres://k3s:<redacted>@db:5432/k3s",
        ),
        (
            'endpoint = ["https://puller:pw@mirror.example:5000"]',
            'endpoint = ["https://puller:<redacted>@mirror.example:5000"]',
        ),
    ],
)
def test_secret_values_are_redacted(line: str, redacted: str) -> None:
    assert redact_text(line + "\n") == redacted + "\n"


@pytest.mark.parametrize(
    "line",
    [
        "token-file: /etc/rancher/k3s/token",
        "tlsPrivateKeyFile: /var/lib/kubelet/pki/kubelet.key",
        "authorization:",
        "authentication:",
        "  mode: Webhook",
        'auth = ""',
        '  username = "puller"',
        "server: https://10.20.0.2:6443",
        '[plugins."io.containerd.grpc.v1.cri".registry.configs."reg:5000".auth]',
        'KUBELET_EXTRA_ARGS="--node-labels=nvidia.com/gpu.present=true"',
        "passwordFile: /run/secrets/db",
    ],
)
def test_everything_else_is_kept_byte_for_byte(line: str) -> None:
    assert redact_text(line + "\r\n") == line + "\r\n"


def test_keys_are_judged_by_their_words() -> None:
    assert [
        is_secret_key(k)
        for k in ("token", "registryToken", "private_key", "authorizationMode", "pass-file")
    ] == [True, True, True, False, False]


def test_a_diff_of_one_or_many_files() -> None:
    one = {"before_header": "a", "before": "token: x\n", "after": "token: y\n"}
    assert redact_diff(one) == {
        "before_header": "a",
        "before": "token: <redacted>\n",
        "after": "token: <redacted>\n",
    }
    assert redact_diff([one, one]) == [redact_diff(one)] * 2
    assert one["before"] == "token: x\n"  # the module's own copy is not changed
