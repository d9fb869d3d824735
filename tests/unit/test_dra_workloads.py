"""The DRA example workloads: their claims name the DeviceClasses gpu_cluster deploys and tenant
quotas cap, their pods ask for no extended GPU resource, and they are valid objects on every
Kubernetes minor that serves resource.k8s.io/v1."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_manifests as cm
from ansible_collections.kubegpu.gpu.plugins.module_utils import dra_workloads as dw
from ansible_collections.kubegpu.gpu.plugins.module_utils import tenancy_settings as ts

from kubegpu.workloads import settings as tenancy_settings

SETTINGS = tenancy_settings({})
WORKLOADS = dw.render_dra_workloads(SETTINGS, "vision")


def requests(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    spec = (
        manifest["spec"]["spec"]
        if manifest["kind"] == "ResourceClaimTemplate"
        else manifest["spec"]
    )
    return list(spec["devices"]["requests"])


def test_claims_name_the_deployed_and_capped_device_classes() -> None:
    classes = {
        name: {
            r["exactly"]["deviceClassName"]
            for m in manifests
            if m["kind"] in ("ResourceClaim", "ResourceClaimTemplate")
            for r in requests(m)
        }
        for name, manifests in WORKLOADS.items()
    }
    assert classes == {
        "dra-single-gpu": {"gpu.nvidia.com"},
        "dra-mig": {"mig.nvidia.com"},
        "dra-shared-gpu": {"gpu.nvidia.com"},
    }
    assert set(ts.DRA_GPU_CLASSES) == set(cm.DRA_DEVICE_CLASSES)


def test_the_gpu_model_and_mig_profile_are_chosen_by_cel() -> None:
    (single,) = requests(WORKLOADS["dra-single-gpu"][0])
    (expression,) = [s["cel"]["expression"] for s in single["exactly"]["selectors"]]
    assert expression == (
        "device.attributes['gpu.nvidia.com'].productName.replace(' ', '-') in "
        '["NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"]'
    )
    (mig,) = requests(WORKLOADS["dra-mig"][0])
    assert "device.attributes['gpu.nvidia.com'].profile == \"1g.10gb\"" in [
        s["cel"]["expression"] for s in mig["exactly"]["selectors"]
    ]
    shared = WORKLOADS["dra-shared-gpu"][0]
    assert shared["kind"] == "ResourceClaim"
    (config,) = shared["spec"]["devices"]["config"]
    assert config["opaque"]["parameters"]["sharing"]["strategy"] == "TimeSlicing"


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_pods_get_their_gpus_only_from_the_claim(name: str) -> None:
    (job,) = [m for m in WORKLOADS[name] if m["kind"] == "Job"]
    pod = job["spec"]["template"]["spec"]
    (claim_ref,) = pod["resourceClaims"]
    assert claim_ref["name"] == dw.CLAIM
    assert "affinity" not in pod and "runtimeClassName" not in pod
    for container in pod["containers"]:
        resources = container["resources"]
        assert resources["claims"] == [{"name": dw.CLAIM}]
        for part in ("requests", "limits"):
            assert not [k for k in resources.get(part, {}) if k.startswith("nvidia.com/")]
    if name == "dra-shared-gpu":
        assert claim_ref == {"resourceClaimName": name, "name": "gpu"}
        assert job["spec"]["completions"] == 2


@pytest.mark.parametrize("minor", ["1.34", "1.35", "1.36", "1.37"])
def test_the_workloads_are_valid_objects(minor: str) -> None:
    for manifests in WORKLOADS.values():
        for manifest in manifests:
            kubernetes_validate.validate(manifest, minor, strict=True)
