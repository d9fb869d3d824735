# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The artifact manifest (data/artifacts.yaml): what kubegpu can install, and what one
inventory pulls.

- load(): the manifest.
- pinned_defaults(manifest): {variable: value} of every pin the role defaults take from it.
- wanted(manifest, variables, architectures): the images and packages an inventory's variables
  select, as the roles would pull them (the mirror registry, the inventory's own pins).
- image_reference(...), parse_reference(ref): references as containerd and Kubernetes take them.
- registry_has(image, ...), apt_index_has(...): ask a registry (manifest HEAD by digest, the
  distribution API's anonymous token flow) and an apt repository's index.

Runs on the controller only (the CLI, preflight's action plugin, the tests): standard library,
the controller's Python (3.8+ syntax).
"""

from __future__ import absolute_import, division, print_function

import gzip
import json
import lzma
import re

from ansible_collections.kubegpu.gpu.plugins.module_utils.data_files import read_yaml

__metaclass__ = type

MANIFEST = "artifacts.yaml"
DOCKER_HUB = "docker.io"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# registry host[:port] (a dot, a port or localhost tells a registry from a path component),
# path, :tag, @digest; docker/distribution's reference grammar, whole strings only.
_REFERENCE = re.compile(
    r"(?:(?P<registry>(?:[A-Za-z0-9-]+\.[A-Za-z0-9.-]*[A-Za-z0-9]|localhost|[A-Za-z0-9-]+:[0-9]+)"
    r"(?::[0-9]{1,5})?)/)?"
    r"(?P<path>[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?"
)
MANIFEST_MEDIA_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)


class ArtifactError(ValueError):
    """A reference, a variable or an answer that cannot be used; the message says which."""


def load():
    return read_yaml(MANIFEST)


def image_reference(registry, path, tag, digest):
    ref = "%s/%s" % (registry.rstrip("/"), path) if registry else path
    if tag:
        ref += ":" + tag
    if digest:
        ref += "@" + digest
    return ref


def manifest_reference(image):
    return image_reference(image["registry"], image["path"], image["tag"], image["digest"])


def parse_reference(ref):
    """(registry, path, tag, digest) of an image reference; a reference without a registry is
    Docker Hub's, where a one-part path lives under library/."""
    match = _REFERENCE.fullmatch(ref) if isinstance(ref, str) else None
    if not match or not (match.group("tag") or match.group("digest")):
        raise ArtifactError(
            "%r is not an image reference pinned by tag or digest "
            "([registry/]path[:tag][@sha256:<64 hex>])" % (ref,)
        )
    registry = match.group("registry") or DOCKER_HUB
    path = match.group("path")
    if registry == DOCKER_HUB and "/" not in path:
        path = "library/" + path
    return registry, path, match.group("tag") or "", match.group("digest") or ""


def pinned_defaults(manifest):
    """The role defaults the manifest pins: each image's variables, each package group's."""
    pins = {}
    for image in manifest["images"]:
        settings = image["settings"]
        if "ref" in settings:
            pins[settings["ref"]] = image_reference(
                "" if image["registry"] == DOCKER_HUB else image["registry"],
                image["path"],
                image["tag"],
                image["digest"],
            )
            continue
        pins[settings["registry"]] = image["registry"]
        pins[settings["path"]] = image["path"]
        pins[settings["tag"]] = image["tag"]
        pins[settings["digest"]] = image["digest"] or ""
    for package in manifest["packages"]:
        pins[package["settings"]["names"]] = list(package["names"])
        pins[package["settings"]["version"]] = package["version"]
    return pins


def _truthy(value):
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y")
    return bool(value)


def _switched_on(variables, entry):
    """A `when` entry: a variable that is true, or var=value (a choice variable set so)."""
    name, sep, value = entry.partition("=")
    if sep:
        return str(variables.get(name)) == value
    return _truthy(variables.get(name))


def wanted_images(manifest, variables):
    """[{name, reference, upstream, digest, platforms, used_by}] of the images the variables
    switch on, each as the cluster pulls it (the inventory's registry, path, tag and digest)."""
    images = []
    for image in manifest["images"]:
        if image["when"] and not any(_switched_on(variables, v) for v in image["when"]):
            continue
        settings = image["settings"]
        if "ref" in settings:
            prefix = str(variables.get(settings["registry"]) or "").rstrip("/")
            ref = str(variables.get(settings["ref"]))
            reference = prefix + "/" + ref if prefix else ref
        else:
            reference = image_reference(
                str(variables.get(settings["registry"])),
                str(variables.get(settings["path"])),
                str(variables.get(settings["tag"]) or ""),
                str(variables.get(settings["digest"]) or ""),
            )
        registry, path, tag, digest = parse_reference(reference)
        images.append(
            {
                "name": image["name"],
                "reference": reference,
                "registry": registry,
                "path": path,
                "tag": tag,
                "digest": digest,
                "upstream": manifest_reference(image),
                "platforms": list(image["platforms"]),
                "used_by": list(image["used_by"]),
            }
        )
    return images


def wanted_packages(manifest, variables, family="Debian", driver_packages=None):
    """[{name, version, repository, source}] of the packages the variables install: the
    manifest's pinned groups at the inventory's versions, then the driver's (driver_packages:
    names decided by the driver role's own code, at the inventory's driver version or the
    branch's newest)."""
    out = []
    for group in manifest["packages"]:
        if family not in group["family"]:
            continue
        names = variables.get(group["settings"]["names"]) or group["names"]
        version = str(variables.get(group["settings"]["version"]) or group["version"])
        repository = str(variables.get(group["repository"]) or "")
        for name in names:
            out.append(
                {
                    "name": name,
                    "version": version,
                    "repository": repository,
                    "repository_variable": group["repository"],
                    "group": group["name"],
                }
            )
    for package in driver_packages or ():
        out.append(dict(package, group="nvidia-driver"))
    return out


# --- asking a registry ---------------------------------------------------------------------------


def _challenge(header):
    """The Bearer challenge's parameters (realm, service, scope), or None."""
    if not header or not header.lower().startswith("bearer "):
        return None
    return dict(re.findall(r'(\w+)="([^"]*)"', header[len("bearer ") :]))


def registry_request(opener, url, method="GET", headers=None, timeout=10):
    """(status, headers, body) of a registry request, following the distribution API's
    anonymous token flow once on a 401 with a Bearer challenge. opener(request, timeout) is
    urllib's urlopen or a stand-in; the caller maps network errors."""
    from urllib.error import HTTPError
    from urllib.parse import urlencode
    from urllib.request import Request

    headers = dict(headers or {})
    for attempt in (1, 2):
        request = Request(url, method=method, headers=headers)
        try:
            with opener(request, timeout=timeout) as response:
                return response.status, dict(response.headers), response.read()
        except HTTPError as exc:
            challenge = _challenge(exc.headers.get("WWW-Authenticate", ""))
            if exc.code != 401 or attempt == 2 or not challenge or "realm" not in challenge:
                return exc.code, dict(exc.headers or {}), b""
            query = dict((k, v) for k, v in challenge.items() if k in ("service", "scope"))
            token_url = challenge["realm"] + ("?" + urlencode(query) if query else "")
            with opener(Request(token_url), timeout=timeout) as response:
                answer = json.loads(response.read().decode("utf-8"))
            token = answer.get("token") or answer.get("access_token")
            if not token:
                return 401, {}, b""
            headers["Authorization"] = "Bearer " + token
    return 401, {}, b""  # not reached


def registry_url(registry, path, reference, scheme="https"):
    host = registry
    if registry == DOCKER_HUB:
        host = "registry-1.docker.io"
    host, _, prefix = host.partition("/")
    repository = prefix + "/" + path if prefix else path
    return "%s://%s/v2/%s/manifests/%s" % (scheme, host, repository, reference)


def registry_has(opener, image, scheme="https"):
    """None when the registry serves the image's manifest (by digest, else by tag), else why
    not (in words)."""
    from urllib.error import URLError

    reference = image["digest"] or image["tag"]
    url = registry_url(image["registry"], image["path"], reference, scheme)
    try:
        status, headers, _ = registry_request(
            opener, url, method="HEAD", headers={"Accept": ", ".join(MANIFEST_MEDIA_TYPES)}
        )
    except (URLError, OSError, ValueError) as exc:
        return "the registry did not answer (%s: %s)" % (url, getattr(exc, "reason", exc))
    if status == 200:
        served = headers.get("Docker-Content-Digest", "")
        if image["digest"] and served and served != image["digest"]:
            return "the registry serves %s under %s" % (served, reference)
        return None
    if status == 404:
        return "not in the registry (%s answered 404)" % url
    if status == 401:
        return "the registry refused anonymous access (%s answered 401)" % url
    return "the registry answered %s for %s" % (status, url)


def resolve_digests(opener, registry, path, tag, scheme="https"):
    """(digest, {platform: digest}) the tag points to now: the index's digest and each
    platform's manifest digest (an image with one platform: its manifest's digest, and that
    platform's from its config)."""
    url = registry_url(registry, path, tag, scheme)
    status, headers, body = registry_request(
        opener, url, headers={"Accept": ", ".join(MANIFEST_MEDIA_TYPES)}
    )
    if status != 200:
        raise ArtifactError("%s answered %s" % (url, status))
    document = json.loads(body.decode("utf-8"))
    digest = headers.get("Docker-Content-Digest", "")
    if not _DIGEST.fullmatch(digest or ""):
        import hashlib

        digest = "sha256:" + hashlib.sha256(body).hexdigest()
    platforms = {}
    for entry in document.get("manifests", ()):
        platform = entry.get("platform") or {}
        if platform.get("os") in (None, "unknown") or platform.get("architecture") == "unknown":
            continue  # attestation manifests
        name = "%s/%s" % (platform["os"], platform["architecture"])
        if platform.get("variant"):
            name += "/" + platform["variant"]
        platforms[name] = entry["digest"]
    return digest, platforms


# --- asking an apt repository --------------------------------------------------------------------


def apt_index_urls(uri, suite, component, architecture):
    """The Packages indexes of one deb822 source entry, best compressed first: a flat
    repository (suite ending in /) keeps them under the suite, others under dists/."""
    uri = uri.replace("$(ARCH)", architecture).rstrip("/")
    if suite.endswith("/"):
        base = uri + "/" + suite.strip("/") if suite.strip("/") else uri
    else:
        base = "%s/dists/%s/%s/binary-%s" % (uri, suite, component, architecture)
    return [base + "/Packages" + ext for ext in (".xz", ".gz", "")]


def parse_packages_index(text):
    """{name: set of versions} of an apt Packages index."""
    found = {}
    name = None
    for line in text.splitlines():
        if line.startswith("Package:"):
            name = line.split(":", 1)[1].strip()
        elif line.startswith("Version:") and name:
            found.setdefault(name, set()).add(line.split(":", 1)[1].strip())
        elif not line.strip():
            name = None
    return found


def read_apt_index(opener, uri, suite, component, architecture):
    """The index of one source entry, parsed, or raise ArtifactError naming every URL tried."""
    from urllib.error import HTTPError, URLError
    from urllib.request import Request

    tried = []
    for url in apt_index_urls(uri, suite, component, architecture):
        try:
            with opener(Request(url), timeout=20) as response:
                data = response.read()
        except HTTPError as exc:
            tried.append("%s (%s)" % (url, exc.code))
            continue
        except (URLError, OSError) as exc:
            tried.append("%s (%s)" % (url, getattr(exc, "reason", exc)))
            continue
        if url.endswith(".xz"):
            data = lzma.decompress(data)
        elif url.endswith(".gz"):
            data = gzip.decompress(data)
        return parse_packages_index(data.decode("utf-8", "replace"))
    raise ArtifactError("no Packages index: " + ", ".join(tried))


def version_matches(wanted, available):
    """Whether an available version is the wanted one: exact, or a glob's match (1.18.*)."""
    import fnmatch

    return any(fnmatch.fnmatchcase(v, wanted) for v in available)


# --- what an inventory pulls, and what its mirrors lack -----------------------------------------

ARCHITECTURES = ("amd64", "arm64")
# The roles whose variables pick artifacts, and the globals that do.
PICKING_ROLES = ("gpu_cluster", "gpu_tenancy", "nvidia_container_toolkit", "nvidia_driver")
GLOBALS = {"kubegpu_architectures": ["amd64"], "kubegpu_artifacts_plain_http_registries": []}


def picking_defaults(roles_dir):
    """The defaults of PICKING_ROLES (roles_dir/<role>/defaults/main.yml) and GLOBALS, merged."""
    import os

    import yaml

    merged = dict(GLOBALS)
    for role in PICKING_ROLES:
        path = os.path.join(str(roles_dir), role, "defaults", "main.yml")
        with open(path, encoding="utf-8") as handle:
            merged.update(yaml.safe_load(handle) or {})
    return merged


class ArtifactInputError(ArtifactError):
    """An inventory value that cannot be used: the variable, what was wrong, what is allowed."""

    def __init__(self, variable, message, allowed):
        ArtifactError.__init__(self, message)
        self.variable = variable
        self.allowed = allowed


def driver_packages(variables, family, distribution):
    """The driver role's packages for one node's settings (both kernel module flavours when the
    role picks one on the node: `auto`): versioned ones at the driver version (empty: the
    branch's newest), the others at any version of the source."""
    from ansible_collections.kubegpu.gpu.plugins.module_utils.nvidia_driver_apt import (
        package_names,
    )

    flavours = variables["nvidia_driver_kernel_module_type"]
    flavours = ["open", "proprietary"] if flavours == "auto" else [flavours]
    source = variables["nvidia_driver_source"]
    at_version = {}
    for flavour in flavours:
        found = package_names(
            distribution,
            family,
            source,
            flavour,
            variables["nvidia_driver_branch"],
            variables["nvidia_driver_build"],
            "",
            bool(variables["nvidia_driver_persistenced_enabled"]),
            packages=tuple(variables["nvidia_driver_packages"] or ()),
            fabricmanager_package=variables["nvidia_driver_fabricmanager_package"],
        )
        for name in found["versioned"]:
            at_version.setdefault(name, True)
        for name in list(found["pin"]) + list(found["extra"]):
            at_version.setdefault(name, False)
    version = str(variables["nvidia_driver_version"] or "")
    variable = {"mirror": "nvidia_driver_mirror_url", "cuda_repo": "nvidia_driver_cuda_repo_url"}
    variable = variable.get(source, "")
    return [
        {
            "name": name,
            "version": version if versioned else "",
            "branch": str(variables["nvidia_driver_branch"]),
            "repository": str(variables.get(variable) or "") if variable else "",
            "repository_variable": variable or "the OS's own sources",
        }
        for name, versioned in at_version.items()
    ]


def select(manifest, hosts):
    """{images, packages, architectures, plain_http} an inventory pulls. hosts: {"localhost":
    the cluster's variables, node: that GPU node's variables}, each the roles' defaults with the
    inventory's values over them, plus "os_family" and "distribution"."""
    cluster = hosts["localhost"]
    try:
        images = wanted_images(manifest, cluster)
    except ArtifactError as exc:
        raise ArtifactInputError(
            "the gpu_cluster/gpu_tenancy image variables", str(exc), "a pinned image reference"
        ) from exc
    packages, architectures, seen = [], [], set()
    for name, variables in hosts.items():
        if name == "localhost":
            continue
        arches = variables["kubegpu_architectures"]
        if not isinstance(arches, list) or not arches or not set(arches) <= set(ARCHITECTURES):
            raise ArtifactInputError(
                "kubegpu_architectures",
                "%r on %s is not a non-empty list of architectures" % (arches, name),
                "a list of " + ", ".join(ARCHITECTURES),
            )
        architectures += [a for a in arches if a not in architectures]
        family, distribution = variables["os_family"], variables["distribution"]
        driver = driver_packages(variables, family, distribution)
        for package in wanted_packages(manifest, variables, family, driver):
            package["family"] = family
            key = json.dumps(package, sort_keys=True)
            if key not in seen:
                seen.add(key)
                packages.append(package)
    return {
        "images": images,
        "packages": packages,
        "architectures": architectures or list(cluster["kubegpu_architectures"]),
        "plain_http": list(cluster["kubegpu_artifacts_plain_http_registries"] or []),
    }


def asked(listing):
    """(how many artifacts check() asks a mirror for, how many it leaves to the OS's own
    sources: the driver packages of the OS archive)."""
    left = [p for p in listing["packages"] if p["group"] == "nvidia-driver" and not p["repository"]]
    return len(listing["images"]) + len(listing["packages"]) - len(left), len(left)


def summary(listing, missing):
    """One line: what was found of what was asked."""
    total, left = asked(listing)
    line = "%d of %d artifacts found on the mirrors, %d missing" % (
        total - len(missing),
        total,
        len(missing),
    )
    if left:
        line += " (%d driver packages come from the OS's own sources, not asked)" % left
    return line


def _missing(kind, name, reason):
    return {"kind": kind, "name": name, "reason": reason}


def check(listing, hosts, opener):
    """[{kind, name, reason}] of every artifact of the list its mirror lacks. Packages from the
    OS's own sources are apt's business (its own mirror settings), not asked here."""
    missing = []
    for image in listing["images"]:
        scheme = "http" if image["registry"] in listing["plain_http"] else "https"
        reason = registry_has(opener, image, scheme)
        if reason:
            missing.append(_missing("image", image["reference"], reason))
    indexes = {}
    nodes = [v for k, v in hosts.items() if k != "localhost"] or [hosts["localhost"]]
    for package in listing["packages"]:
        if package["group"] == "nvidia-driver" and not package["repository"]:
            continue
        label = package["name"] + ("=" + package["version"] if package["version"] else "")
        if not package["repository"]:
            missing.append(
                _missing(
                    "package",
                    label,
                    "%s is empty: the packages come from the vendor's repository, not a mirror"
                    % package["repository_variable"],
                )
            )
            continue
        if package["family"] != "Debian":
            continue
        prefix = package["repository_variable"].rsplit("_url", 1)[0]
        suites = nodes[0].get(prefix + "_suites") or ["/"]
        components = nodes[0].get(prefix + "_components") or [""]
        versions, problems = set(), []
        for arch in listing["architectures"]:
            for suite in suites:
                for component in [""] if suite.endswith("/") else components:
                    key = (package["repository"], suite, component, arch)
                    if key not in indexes:
                        try:
                            indexes[key] = read_apt_index(opener, *key)
                        except ArtifactError as exc:
                            indexes[key] = exc
                    if isinstance(indexes[key], Exception):
                        problems.append(str(indexes[key]))
                    else:
                        versions |= indexes[key].get(package["name"], set())
        if package["version"] and versions and version_matches(package["version"], versions):
            continue
        if not package["version"] and versions:
            continue
        detail = (
            "; ".join(problems)
            if problems and not versions
            else "the mirror has %s" % (", ".join(sorted(versions)) or "none")
        )
        missing.append(_missing("package", label, "not in the mirror's index (%s)" % detail))
    return missing
