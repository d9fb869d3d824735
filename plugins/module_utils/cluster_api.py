# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""A thin client for the Kubernetes API, shared by gpu_manifests and gpu_cluster_readiness.

It speaks plain JSON (dicts in, dicts out) through the kubernetes Python client's ApiClient, so
no model class validates or renames fields on the way, and every request carries a timeout. It
works with both shapes of ApiClient.call_api: up to 36.x it built and sent a request from
(path, method, query_params, ...) and raised ApiException for an HTTP error; from 37.x
param_serialize builds the request, call_api(method, url, ...) sends it and returns the response
unread, and HTTP errors are the caller's to raise.
Connection problems become ClusterApiError with a message that says what to check; the
kubeconfig's content never appears in a message. A request the server asks to have sent again
(HTTP 429 or 5xx with a Retry-After header) is, after that wait, as client-go does.
"""

from __future__ import absolute_import, division, print_function

import contextlib
import json
import os
import time

__metaclass__ = type

try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.client.rest import ApiException

    HAS_KUBERNETES = True
    KUBERNETES_IMPORT_ERROR = None
except ImportError as exc:  # reported by the modules through missing_required_lib
    HAS_KUBERNETES = False
    KUBERNETES_IMPORT_ERROR = exc
    ApiException = Exception


# The options every module that uses ClusterApi takes (documented once, in the doc fragment
# kubegpu.gpu.cluster_api).
API_ARGUMENT_SPEC = dict(
    kubeconfig=dict(type="path", required=True, no_log=True),
    context=dict(type="str"),
    timeout=dict(type="int", default=10),
)


class ClusterApiError(Exception):
    """The API could not be used: message says why; status is the HTTP status if any."""

    def __init__(self, message, status=None):
        super(ClusterApiError, self).__init__(message)
        self.status = status


# Kinds kubegpu manages: (apiVersion, kind) -> (path prefix, plural, namespaced).
KINDS = {
    ("v1", "Namespace"): ("/api/v1", "namespaces", False),
    ("v1", "Node"): ("/api/v1", "nodes", False),
    ("v1", "Pod"): ("/api/v1", "pods", True),
    ("v1", "ServiceAccount"): ("/api/v1", "serviceaccounts", True),
    ("v1", "ConfigMap"): ("/api/v1", "configmaps", True),
    ("v1", "Service"): ("/api/v1", "services", True),
    ("v1", "ResourceQuota"): ("/api/v1", "resourcequotas", True),
    ("v1", "LimitRange"): ("/api/v1", "limitranges", True),
    ("apps/v1", "DaemonSet"): ("/apis/apps/v1", "daemonsets", True),
    ("node.k8s.io/v1", "RuntimeClass"): ("/apis/node.k8s.io/v1", "runtimeclasses", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): (
        "/apis/rbac.authorization.k8s.io/v1",
        "clusterroles",
        False,
    ),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): (
        "/apis/rbac.authorization.k8s.io/v1",
        "clusterrolebindings",
        False,
    ),
    ("apps/v1", "Deployment"): ("/apis/apps/v1", "deployments", True),
    ("rbac.authorization.k8s.io/v1", "Role"): ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): (
        "/apis/rbac.authorization.k8s.io/v1",
        "rolebindings",
        True,
    ),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): (
        "/apis/apiextensions.k8s.io/v1",
        "customresourcedefinitions",
        False,
    ),
    # node-feature-discovery's objects: read only (what reset must not delete with its CRDs).
    ("nfd.k8s-sigs.io/v1alpha1", "NodeFeature"): (
        "/apis/nfd.k8s-sigs.io/v1alpha1",
        "nodefeatures",
        True,
    ),
    ("nfd.k8s-sigs.io/v1alpha1", "NodeFeatureRule"): (
        "/apis/nfd.k8s-sigs.io/v1alpha1",
        "nodefeaturerules",
        False,
    ),
    ("nfd.k8s-sigs.io/v1alpha1", "NodeFeatureGroup"): (
        "/apis/nfd.k8s-sigs.io/v1alpha1",
        "nodefeaturegroups",
        True,
    ),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): (
        "/apis/monitoring.coreos.com/v1",
        "servicemonitors",
        True,
    ),
    ("resource.k8s.io/v1", "DeviceClass"): ("/apis/resource.k8s.io/v1", "deviceclasses", False),
    ("resource.k8s.io/v1", "ResourceSlice"): ("/apis/resource.k8s.io/v1", "resourceslices", False),
}


def object_path(api_version, kind, name=None, namespace=None):
    """The REST path of a collection (name None) or of one object."""
    try:
        prefix, plural, namespaced = KINDS[(api_version, kind)]
    except KeyError:
        raise ClusterApiError(
            "kind %s %s is not one kubegpu manages" % (api_version, kind)
        ) from None
    path = prefix
    if namespaced and namespace:
        path += "/namespaces/" + namespace
    path += "/" + plural
    if name:
        path += "/" + name
    return path


# A request the server turns away with a Retry-After header is sent again after the wait it
# names, up to this many times (client-go's default): HTTP 429 while the watch cache of a kind
# starts up ("storage is (re)initializing", right after its CRD is made, a server restart) or
# while API Priority and Fairness throttles; 5xx from a server that is shedding load. The server
# did not act on such a request, so sending it again is safe whatever its verb.
MAX_RETRIES = 10
MAX_RETRY_WAIT_S = 30


def retry_after(exc):
    """Seconds the server asks the client to wait before sending the request again, or None
    when the answer is not one to retry (no Retry-After, or a status other than 429 or 5xx)."""
    status = getattr(exc, "status", None) or 0
    if status != 429 and status < 500:
        return None
    headers = getattr(exc, "headers", None) or {}
    try:
        seconds = int(str(headers.get("Retry-After", "")).strip())
    except ValueError:
        return None
    return min(max(seconds, 0), MAX_RETRY_WAIT_S)


def _api_message(exc):
    try:
        body = json.loads(exc.body or "{}")
        return body.get("message") or exc.reason
    except (ValueError, TypeError, AttributeError):
        return getattr(exc, "reason", None) or str(exc)


class ClusterApi:
    """A connection to one API server, made from a kubeconfig file."""

    def __init__(self, kubeconfig, context=None, timeout=10):
        if not HAS_KUBERNETES:
            raise ClusterApiError(
                "the kubernetes Python library is not installed on the "
                "controller: %s" % KUBERNETES_IMPORT_ERROR
            )
        if not kubeconfig:
            raise ClusterApiError("no kubeconfig given")
        if not os.path.isfile(kubeconfig):
            raise ClusterApiError("the kubeconfig file does not exist (or is not a file)")
        if not os.access(kubeconfig, os.R_OK):
            raise ClusterApiError("the kubeconfig file is not readable by this user")
        self.timeout = timeout
        configuration = k8s_client.Configuration()
        try:
            k8s_config.load_kube_config(
                config_file=kubeconfig,
                context=context or None,
                client_configuration=configuration,
                persist_config=False,
            )
        except Exception as exc:  # ConfigException, YAML errors, missing certificate files
            raise ClusterApiError("the kubeconfig cannot be used: %s" % _clean(exc)) from exc
        # One try per request: an unreachable server answers within the timeout, not 4 times it.
        configuration.retries = False
        self.host = configuration.host
        self._client = k8s_client.ApiClient(configuration=configuration)

    def close(self):
        with contextlib.suppress(Exception):  # closing is best effort
            self._client.close()

    def request(self, method, path, body=None, query=None, content_type=None, raw=False):
        """JSON (or text with raw=True) of one request; ApiException for HTTP errors,
        ClusterApiError when the server cannot be reached."""
        headers = {"Accept": "application/json" if not raw else "*/*"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        params = list((query or {}).items())
        for attempt in range(MAX_RETRIES + 1):
            try:
                content = self._send(method, path, params, headers, body)
                break
            except ApiException as exc:
                wait = retry_after(exc)
                if wait is None or attempt == MAX_RETRIES:
                    raise
                time.sleep(wait)
            except Exception as exc:  # urllib3 MaxRetryError, timeouts, TLS errors
                raise ClusterApiError(
                    "cannot reach the API server at %s within %ss: %s"
                    % (self.host, self.timeout, _clean(exc))
                ) from exc
        data = content.decode("utf-8", "replace")
        if raw:
            return data
        return json.loads(data) if data else {}

    def _send(self, method, path, query, headers, body):
        return send(self._client, method, path, query, headers, body, self.timeout)

    def get(self, path, query=None, missing_ok=False):
        try:
            return self.request("GET", path, query=query)
        except ApiException as exc:
            if missing_ok and exc.status == 404:
                return None
            raise ClusterApiError("GET %s: %s" % (path, _api_message(exc)), exc.status) from exc

    def version(self):
        """The server's /version, or ClusterApiError with the reason it cannot be had."""
        try:
            return self.request("GET", "/version")
        except ApiException as exc:
            if exc.status in (401, 403):
                raise ClusterApiError(
                    "the API server at %s refuses these credentials (HTTP %s): "
                    "%s" % (self.host, exc.status, _api_message(exc)),
                    exc.status,
                ) from exc
            raise ClusterApiError("GET /version: %s" % _api_message(exc), exc.status) from exc

    def has_resource(self, group_version, plural):
        """Whether API discovery lists `plural` in group_version (e.g. a CRD's kind)."""
        prefix = "/api/" if group_version == "v1" else "/apis/"
        found = self.get(prefix + group_version, missing_ok=True)
        if not found:
            return False
        return any(r.get("name") == plural for r in found.get("resources") or [])

    def list(self, path, label_selector=None):
        query = {"labelSelector": label_selector} if label_selector else None
        return (self.get(path, query=query) or {}).get("items") or []

    def create(self, path, body):
        try:
            return self.request("POST", path, body=body)
        except ApiException as exc:
            raise ClusterApiError("POST %s: %s" % (path, _api_message(exc)), exc.status) from exc

    def delete(self, path, grace_period_seconds=None):
        """Delete; a missing object is not an error. Returns whether something was deleted."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        try:
            self.request("DELETE", path, body=body)
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise ClusterApiError("DELETE %s: %s" % (path, _api_message(exc)), exc.status) from exc

    def log(self, path, container=None):
        query = {"container": container} if container else None
        try:
            return self.request("GET", path + "/log", query=query, raw=True)
        except ApiException as exc:
            raise ClusterApiError("GET %s/log: %s" % (path, _api_message(exc)), exc.status) from exc


def _clean(exc):
    """An exception as one short line (urllib3's reprs run long)."""
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


def send(api_client, method, path, query=(), headers=None, body=None, timeout=None):
    """The body (bytes) of one request through the client's ApiClient, whichever call_api it
    has; ApiException for an HTTP error status."""
    query, headers = list(query), dict(headers or {})
    if hasattr(api_client, "param_serialize"):  # kubernetes 37 and later
        request = api_client.param_serialize(
            method,
            path,
            query_params=query,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = api_client.call_api(*request, _request_timeout=timeout)
        content = response.read()
        if not 200 <= response.status <= 299:
            raise ApiException(http_resp=response)
        return content
    response = api_client.call_api(  # kubernetes 30 to 36
        path,
        method,
        query_params=query,
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
        _preload_content=False,
        _request_timeout=timeout,
    )
    return response.data
