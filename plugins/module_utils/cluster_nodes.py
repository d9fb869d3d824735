# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Node labels and taints as JSON patches that record what kubegpu added.

- node_patch(node, labels, taints): the patch that gives a node these labels and taints, with
  the record of what kubegpu added in two annotations.
- node_reset_patch(node): the patch that removes exactly what the record names, and the record.

Runs on the controller's Python (3.8+ syntax), standard library only.
"""

from __future__ import absolute_import, division, print_function

import json

from ansible_collections.kubegpu.gpu.plugins.module_utils.k8s_values import json_pointer_escape

__metaclass__ = type

# Annotations on nodes that record which labels and taints kubegpu added (reset removes them).
APPLIED_LABELS_ANNOTATION = "kubegpu.io/applied-labels"
APPLIED_TAINTS_ANNOTATION = "kubegpu.io/applied-taints"


def _applied(annotations, key):
    try:
        value = json.loads(annotations.get(key) or "[]")
    except ValueError:
        return []
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _taint_id(taint):
    return "%s:%s" % (taint.get("key"), taint.get("effect"))


def node_patch(node, labels, taints):
    """A JSON patch (list of ops) that gives the node these labels and taints; [] if it has them.

    Labels are added key by key. Taints are read-merged-written: a taint with the same key and
    effect is updated in place, a new one appended, others kept; the write is guarded by a `test`
    of the list read, so a concurrent change makes the patch fail instead of being lost. What
    kubegpu added or changed is recorded in two annotations, which node_reset_patch reads.
    """
    meta = node.get("metadata") or {}
    current_labels = meta.get("labels")
    annotations = meta.get("annotations")
    spec = node.get("spec")
    ops = []
    applied_labels = _applied(annotations or {}, APPLIED_LABELS_ANNOTATION)
    applied_taints = _applied(annotations or {}, APPLIED_TAINTS_ANNOTATION)
    new_labels = [k for k in sorted(labels) if (current_labels or {}).get(k) != labels[k]]
    if new_labels:
        if current_labels is None:
            ops.append(
                {
                    "op": "add",
                    "path": "/metadata/labels",
                    "value": dict((k, labels[k]) for k in new_labels),
                }
            )
        else:
            ops += [
                {
                    "op": "add",
                    "path": "/metadata/labels/" + json_pointer_escape(k),
                    "value": labels[k],
                }
                for k in new_labels
            ]
    current_taints = (spec or {}).get("taints")
    merged = [dict(t) for t in (current_taints or [])]
    changed_taints = []
    for want in taints:
        for index, have in enumerate(merged):
            if have.get("key") == want["key"] and have.get("effect") == want["effect"]:
                if (have.get("value") or None) != (want.get("value") or None):
                    merged[index] = dict(want)
                    changed_taints.append(_taint_id(want))
                break
        else:
            merged.append(dict(want))
            changed_taints.append(_taint_id(want))
    if changed_taints:
        if spec is None:
            ops.append({"op": "add", "path": "/spec", "value": {"taints": merged}})
        elif current_taints is None:
            ops.append({"op": "add", "path": "/spec/taints", "value": merged})
        else:
            ops.append({"op": "test", "path": "/spec/taints", "value": current_taints})
            ops.append({"op": "replace", "path": "/spec/taints", "value": merged})
    record = {}
    all_labels = sorted(set(applied_labels) | set(new_labels))
    if all_labels != sorted(applied_labels):
        record[APPLIED_LABELS_ANNOTATION] = json.dumps(all_labels)
    all_taints = sorted(set(applied_taints) | set(changed_taints))
    if all_taints != sorted(applied_taints):
        record[APPLIED_TAINTS_ANNOTATION] = json.dumps(all_taints)
    ops += _annotation_ops(annotations, record)
    return ops


def _annotation_ops(annotations, record):
    if not record:
        return []
    if annotations is None:
        return [{"op": "add", "path": "/metadata/annotations", "value": record}]
    return [
        {"op": "add", "path": "/metadata/annotations/" + json_pointer_escape(k), "value": v}
        for k, v in sorted(record.items())
    ]


def node_reset_patch(node):
    """A JSON patch removing the labels and taints kubegpu recorded on the node, and the record."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    ops = []
    for key in _applied(annotations, APPLIED_LABELS_ANNOTATION):
        if key in labels:
            ops.append({"op": "remove", "path": "/metadata/labels/" + json_pointer_escape(key)})
    recorded = set(_applied(annotations, APPLIED_TAINTS_ANNOTATION))
    current = (node.get("spec") or {}).get("taints")
    if current and recorded:
        kept = [t for t in current if _taint_id(t) not in recorded]
        if len(kept) != len(current):
            ops.append({"op": "test", "path": "/spec/taints", "value": current})
            ops.append({"op": "replace", "path": "/spec/taints", "value": kept})
    for key in (APPLIED_LABELS_ANNOTATION, APPLIED_TAINTS_ANNOTATION):
        if key in annotations:
            ops.append(
                {"op": "remove", "path": "/metadata/annotations/" + json_pointer_escape(key)}
            )
    return ops
