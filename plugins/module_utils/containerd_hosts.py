# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Registry mirrors for containerd's CRI plugin: one ``hosts.toml`` per registry host under a
``certs.d`` folder, which the CRI plugin's ``registry.config_path`` names (containerd 1.7 and 2.x
read it on every pull, so these files need no restart; the config_path setting does).

``<config_path>/<registry host>/hosts.toml`` (``_default`` for every registry without its own)::

    server = "https://registry.example"      # the upstream, tried after the mirrors

    [host."http://10.0.0.1:5000"]
      capabilities = ["pull", "resolve"]

containerd talks plain HTTP to an ``http://`` endpoint and TLS to an ``https://`` one
(``skip_verify`` skips the certificate check, ``ca`` names a CA bundle). The files kubegpu
writes carry its mark; only those are ever changed or removed.

Runs on the target's Python (3.8+), standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.kubegpu.gpu.plugins.module_utils import toml_text

HOSTS_MARK = "Managed by kubegpu (kubegpu.gpu.containerd_runtime): registry mirrors"
VARIABLE = "container_runtime_registry_mirrors"
SETTINGS = ("endpoints", "skip_verify", "ca", "fallback")
# A registry host as containerd names its folder: a DNS name or IP with an optional port, or
# _default.
_HOST = re.compile(
    r"^(_default|[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*(:[0-9]{1,5})?)$"
)
_ENDPOINT = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?$")


class ContainerdHostsError(Exception):
    """Mirror settings that cannot be written."""


def mirror_problem(mirrors):
    """The first thing wrong with the mirror settings, naming the variable; None when fine."""
    if not isinstance(mirrors, dict):
        return "%s must be a mapping of registry host -> settings, found %s" % (
            VARIABLE,
            type(mirrors).__name__,
        )
    for host in sorted(mirrors):
        settings = mirrors[host]
        where = "%s[%r]" % (VARIABLE, host)
        if not isinstance(host, str) or not _HOST.match(host):
            return (
                "%s: the key must be a registry host as images name it (for example "
                "registry.k8s.io, docker.io, 10.0.0.1:5000) or _default" % where
            )
        if not isinstance(settings, dict):
            return "%s must be a mapping with endpoints (a list of URLs)" % where
        unknown = sorted(set(settings) - set(SETTINGS))
        if unknown:
            return "%s: unknown setting %s; allowed: %s" % (
                where,
                ", ".join(unknown),
                ", ".join(SETTINGS),
            )
        endpoints = settings.get("endpoints")
        if not isinstance(endpoints, list) or not endpoints:
            return "%s.endpoints must be a non-empty list of mirror URLs" % where
        for url in endpoints:
            if not isinstance(url, str) or not _ENDPOINT.match(url):
                return (
                    "%s.endpoints: %r is not a mirror URL; expected http://host[:port][/path] "
                    "(plain HTTP) or https://host[:port][/path]" % (where, url)
                )
        for flag in ("skip_verify", "fallback"):
            if flag in settings and not isinstance(settings[flag], bool):
                return "%s.%s must be true or false, found %r" % (where, flag, settings[flag])
        ca = settings.get("ca")
        if ca is not None and (not isinstance(ca, str) or not os.path.isabs(ca)):
            return "%s.ca must be the absolute path of a CA bundle on the node" % where
    return None


def upstream(host):
    """The registry's own endpoint, tried after the mirrors (``fallback``)."""
    if host in ("docker.io", "registry-1.docker.io"):
        return "https://registry-1.docker.io"
    return "https://" + host


def render_hosts(host, settings):
    """The hosts.toml text for one registry host."""
    lines = [
        "# %s. Changes here are overwritten." % HOSTS_MARK,
        "# Mirrors of %s, tried in this order%s."
        % (host, "" if host == "_default" else ", then the registry itself"),
    ]
    if host != "_default" and settings.get("fallback", True):
        lines.append("server = %s" % toml_text.quote_string(upstream(host)))
    for url in settings["endpoints"]:
        lines += ["", "[host.%s]" % toml_text.quote_string(url)]
        lines.append('  capabilities = ["pull", "resolve"]')
        if settings.get("skip_verify"):
            lines.append("  skip_verify = true")
        if settings.get("ca"):
            lines.append("  ca = %s" % toml_text.quote_string(settings["ca"]))
    return "\n".join(lines) + "\n"


def hosts_path(config_path, host):
    return os.path.join(config_path, host, "hosts.toml")


def plan_hosts(config_path, mirrors, existing):
    """What to write and remove under `config_path`.

    `existing` maps each registry folder's name that has a hosts.toml to its text. Returns
    {"write": {path: text}, "remove": [path], "kept": [path of files not kubegpu's]}: a host
    whose hosts.toml is not kubegpu's is refused (the operator's file stays theirs).
    """
    write, remove = {}, []
    for host in sorted(mirrors):
        path = hosts_path(config_path, host)
        text = render_hosts(host, mirrors[host])
        old = existing.get(host)
        if old is not None and HOSTS_MARK not in old:
            raise ContainerdHostsError(
                "%s exists and is not kubegpu's; nothing was changed. Move it away, or take %r "
                "out of %s to keep it" % (path, host, VARIABLE)
            )
        if old != text:
            write[path] = text
    for host in sorted(existing):
        if host not in mirrors and HOSTS_MARK in existing[host]:
            remove.append(hosts_path(config_path, host))
    return {"write": write, "remove": remove}


def read_existing(config_path):
    """{registry folder: hosts.toml text} under config_path (an empty dict when it is absent)."""
    found = {}
    if not os.path.isdir(config_path):
        return found
    for name in sorted(os.listdir(config_path)):
        path = hosts_path(config_path, name)
        if os.path.isfile(path):
            with open(path, "r", encoding="utf-8", errors="replace") as f:
                found[name] = f.read()
    return found
