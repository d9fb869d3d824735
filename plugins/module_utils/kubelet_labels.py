# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Node labels and taints: what a kubelet may set on its own node, and their syntax.

Pure functions over data and text: they run on the target's Python (3.8+), import only the
standard library, and are tested without a host.

- validate_node_labels(labels): key and value syntax, and what a kubelet may set on its own node
- validate_taints(taints): key, value and effect syntax, duplicates
- split_node_labels(labels): (labels a kubelet may set on itself, labels only the API may set)
- normalize_taints / format_taint: taints as dicts and as key=value:Effect text
- sanitize_label_value(text): a product name made into a label value the way GPU Feature
  Discovery does it ("Tesla K80" -> "Tesla-K80"), then trimmed to the label value rules
"""

from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type

#
# Syntax (k8s.io/apimachinery validation): a key is an optional prefix, a DNS subdomain of at
# most 253 characters, and "/", then a name of at most 63 characters, alphanumeric at both ends
# with '-', '_' and '.' inside. A value is empty or up to 63 characters of the same alphabet,
# alphanumeric at both ends. Taint keys and values follow the same rules.
#
# Self-labelling (k8s.io/kubelet/pkg/apis/well_known_labels.go and the kubelet's --node-labels
# check): a key whose prefix is kubernetes.io or k8s.io, or a subdomain of either, is refused
# unless it is one of the labels below or its prefix is kubelet.kubernetes.io or
# node.kubernetes.io (or a subdomain of them). The kubelet exits at startup on such a label, and
# the NodeRestriction admission plugin refuses it on the Node object.

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

KUBELET_ALLOWED_LABELS = (
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/os",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "kubernetes.io/arch",
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
)
KUBELET_ALLOWED_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")
_RESTRICTED_NAMESPACES = ("kubernetes.io", "k8s.io")

# Each matched against the whole text (fullmatch): with "$", "true\n" would pass, and the line
# break would reach KUBELET_EXTRA_ARGS.
_NAME_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_RE = re.compile(r"%s(\.%s)*" % (_DNS_LABEL, _DNS_LABEL))
_NAME_RULE = (
    "63 characters or fewer, start and end with a letter or digit, and contain only letters, "
    "digits, '-', '_' and '.'"
)


def _in_namespace(namespace, parent):
    return namespace == parent or namespace.endswith("." + parent)


def _key_namespace(key):
    return key.split("/", 1)[0] if "/" in key else ""


def is_kubelet_self_label(key):
    """True when a kubelet may set this label key on its own Node (NodeRestriction rules)."""
    namespace = _key_namespace(key)
    if not any(_in_namespace(namespace, ns) for ns in _RESTRICTED_NAMESPACES):
        return True
    if key in KUBELET_ALLOWED_LABELS:
        return True
    return any(_in_namespace(namespace, ns) for ns in KUBELET_ALLOWED_LABEL_NAMESPACES)


def split_node_labels(labels):
    """(self_settable, api_only): labels a kubelet may set on itself, and those only the API may.

    Labels in the second dict must be applied by a cluster administrator through the API
    (role gpu_cluster); a kubelet given them refuses to start.
    """
    own, api_only = {}, {}
    for key, value in (labels or {}).items():
        (own if is_kubelet_self_label(str(key)) else api_only)[key] = value
    return own, api_only


def _key_problems(key, where):
    if not isinstance(key, str):
        return ["%s: key %r must be a string" % (where, key)]
    if not key:
        return ["%s: a key is empty; keys look like example.com/name or name" % where]
    bad = "%s: key %r is not a valid key: " % (where, key)
    if key.count("/") > 1:
        return [bad + "it may hold at most one '/', between the prefix and the name"]
    prefix, _, name = key.rpartition("/")
    problems = []
    if "/" in key and (not prefix or len(prefix) > 253 or not _SUBDOMAIN_RE.fullmatch(prefix)):
        problems.append(
            bad + "the prefix %r must be a DNS subdomain (lowercase letters, digits, '-' and "
            "'.', each part starting and ending with a letter or digit, at most 253 "
            "characters)" % prefix
        )
    if not name or len(name) > 63 or not _NAME_RE.fullmatch(name):
        problems.append(bad + "the name %r must be %s" % (name, _NAME_RULE))
    return problems


def _value_problems(value, where, kind="label"):
    if not isinstance(value, str):
        return [
            '%s must be a string, got %r (%s); quote it in YAML, for example "%s"'
            % (where, value, type(value).__name__, _yaml_scalar_text(value))
        ]
    if value == "" or (len(value) <= 63 and _NAME_RE.fullmatch(value)):
        return []
    suggestion = sanitize_label_value(value)
    hint = "; for example %r" % suggestion if suggestion and suggestion != value else ""
    return [
        "%s is %r, which is not a valid %s value: it must be empty or %s%s"
        % (where, value, kind, _NAME_RULE, hint)
    ]


def _yaml_scalar_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def validate_node_labels(labels):
    """One message per problem with node labels (key -> value) a kubelet is to set on itself."""
    if not labels:
        return []
    if not isinstance(labels, dict):
        return [
            "node_labels: must be a mapping of label key to value, got %s" % type(labels).__name__
        ]
    messages = []
    for key in sorted(labels, key=str):
        key_problems = _key_problems(key, "node_labels")
        messages.extend(key_problems)
        messages.extend(_value_problems(labels[key], "node_labels: the value of %r" % (key,)))
        if not key_problems and not is_kubelet_self_label(key):
            namespace = _key_namespace(key)
            root = next(ns for ns in _RESTRICTED_NAMESPACES if _in_namespace(namespace, ns))
            messages.append(
                "node_labels: %r is in the %s namespace, where a kubelet may not label its own "
                "node (NodeRestriction): the kubelet refuses to start with it. In the "
                "kubernetes.io and k8s.io namespaces a kubelet may only set keys under %s (or "
                "their subdomains) and %s. Use a prefix of your own (for example nvidia.com/ or "
                "example.com/), or set the label through the API (role gpu_cluster)."
                % (
                    key,
                    root,
                    " or ".join(p + "/" for p in KUBELET_ALLOWED_LABEL_NAMESPACES),
                    ", ".join(KUBELET_ALLOWED_LABELS),
                )
            )
    return messages


def parse_taint_text(text):
    """{'key','value','effect'} from 'key=value:Effect' or 'key:Effect'; None when malformed."""
    if ":" not in text:
        return None
    left, _, effect = text.rpartition(":")
    key, sep, value = left.partition("=")
    return {"key": key, "value": value if sep else "", "effect": effect}


def normalize_taints(taints):
    """Taints (dicts or 'key=value:Effect' strings) as dicts with key, value and effect."""
    result = []
    for taint in taints or []:
        if isinstance(taint, str):
            parsed = parse_taint_text(taint)
        else:
            parsed = {
                "key": taint.get("key"),
                "value": taint.get("value") if taint.get("value") is not None else "",
                "effect": taint.get("effect"),
            }
        result.append(parsed)
    return result


def format_taint(taint):
    if taint.get("value"):
        return "%s=%s:%s" % (taint["key"], taint["value"], taint["effect"])
    return "%s:%s" % (taint["key"], taint["effect"])


def validate_taints(taints):
    """One message per problem with taints to register the node with.

    Each taint is a mapping with key, optional value and effect, or a string key=value:Effect.
    """
    if not taints:
        return []
    if not isinstance(taints, list):
        return ["node_taints: must be a list of taints, got %s" % type(taints).__name__]
    messages = []
    seen = {}
    for index, taint in enumerate(taints):
        where = "node_taints[%d]" % index
        if isinstance(taint, str):
            parsed = parse_taint_text(taint)
            if parsed is None:
                messages.append(
                    "%s: %r is not a taint; write key=value:Effect or key:Effect, or a mapping "
                    "with key, value and effect" % (where, taint)
                )
                continue
        elif isinstance(taint, dict):
            extra = sorted(set(map(str, taint)) - {"key", "value", "effect"})
            if extra:
                messages.append(
                    "%s: unknown field(s) %s; a taint has key, value and effect"
                    % (where, ", ".join(extra))
                )
            parsed = {
                "key": taint.get("key"),
                "value": taint.get("value") if taint.get("value") is not None else "",
                "effect": taint.get("effect"),
            }
            if parsed["key"] is None:
                messages.append("%s: the key is missing" % where)
                parsed["key"] = ""
                continue
        else:
            messages.append(
                "%s: must be a mapping with key, value and effect, or a string "
                "key=value:Effect, got %s" % (where, type(taint).__name__)
            )
            continue
        key_problems = _key_problems(parsed["key"], where)
        messages.extend(key_problems)
        messages.extend(_value_problems(parsed["value"], "%s: the value" % where, "taint"))
        if parsed["effect"] not in TAINT_EFFECTS:
            messages.append(
                "%s: effect %r is not one of %s"
                % (where, parsed["effect"], ", ".join(TAINT_EFFECTS))
            )
            continue
        if key_problems:
            continue
        identity = (parsed["key"], parsed["effect"])
        if identity in seen:
            messages.append(
                "%s: same key %r and effect %s as node_taints[%d]; a node holds one taint per "
                "key and effect" % (where, parsed["key"], parsed["effect"], seen[identity])
            )
        else:
            seen[identity] = index
    return messages


def sanitize_label_value(text):
    """A label value made from free text, such as a GPU product name.

    First what GPU Feature Discovery does to product names (k8s-device-plugin
    internal/lm/resource.go: every space becomes '-', so "Tesla K80" -> "Tesla-K80"), then what
    kubegpu adds so that the result is always a valid label value: other characters outside
    letters, digits, '-', '_' and '.' become '-', the text is cut to 63 characters, and
    characters other than letters and digits are stripped from both ends.
    """
    value = str(text).strip().replace(" ", "-")
    value = re.sub(r"[^A-Za-z0-9._-]", "-", value)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def gfd_product_value(model, mig_profile=None):
    """The nvidia.com/gpu.product value GPU Feature Discovery writes for a GPU (or MIG device).

    GFD joins the non-empty parts (model, and "MIG" and the profile for MIG devices) with '-',
    after turning the spaces in each part into '-'. Time-slicing adds "-SHARED" (not modelled).
    """
    parts = [model] + (["MIG", mig_profile] if mig_profile else [])
    return "-".join(p.replace(" ", "-") for p in parts if p)
