# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The options of the modules that talk to the Kubernetes API through module_utils/cluster_api
(gpu_manifests, gpu_cluster_readiness, gpu_node_maintenance); their argument spec is
cluster_api.API_ARGUMENT_SPEC."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path of the kubeconfig file. Never logged.
    type: path
    required: true
  context:
    description:
      - The kubeconfig context to use; its current context when unset.
    type: str
  timeout:
    description:
      - Seconds to wait for each API request.
    type: int
    default: 10
"""
