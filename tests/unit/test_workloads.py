"""Training workloads and the smoke check, rendered from the gpu_tenancy variables.

Every example (and the smoke Job) is validated strictly against the upstream schemas of every
Kubernetes minor kubegpu supports, checked against the Pod Security "restricted" profile its
tenant namespace enforces, and checked for what makes GPU jobs schedule: equal GPU requests and
limits, the nvidia RuntimeClass, the GPU taint toleration and node affinity on GFD labels. The
committed files under examples/ and dashboards/ must equal what the renderer makes now.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from ansible_collections.kubegpu.gpu.plugins.module_utils import tenancy_settings as ts
from ansible_collections.kubegpu.gpu.plugins.module_utils import training as tr

from kubegpu import smoke, workloads
from kubegpu.errors import InputError

SUPPORTED_MINORS = [f"1.{minor}" for minor in range(29, 36)]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def settings() -> dict[str, Any]:
    return workloads.settings(workloads.load_values(REPO / "examples" / "values.yml"))


@pytest.fixture(scope="module")
def rendered(settings: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out = dict(tr.render_workloads(settings, "vision"))
    out["smoke"] = tr.render_smoke(settings, "vision", "abc123", products=["NVIDIA-H200"])
    return out


def jobs(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in manifests if m["kind"] == "Job"]


def pod_spec(job: dict[str, Any]) -> dict[str, Any]:
    return dict(job["spec"]["template"]["spec"])


def expressions(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert len(terms) == 1
    return {e["key"]: e for e in terms[0]["matchExpressions"]}


def test_every_workload_is_valid_for_every_supported_kubernetes(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    assert set(rendered) == {
        "pytorch-single-gpu",
        "pytorch-ddp",
        "tensorflow-multiworker",
        "pytorch-time-sliced",
        "pytorch-mig",
        "smoke",
    }
    for manifests in rendered.values():
        for manifest in manifests:
            for version in SUPPORTED_MINORS:
                assert kubernetes_validate.validate(manifest, version, strict=True) == version


# The Pod Security Standards "restricted" profile (kubernetes.io/docs/concepts/security/
# pod-security-standards), as far as these pod specs can touch it.
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def assert_restricted(spec: dict[str, Any]) -> None:
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not spec.get(key), key
    pod_sc = spec.get("securityContext") or {}
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        assert kinds <= RESTRICTED_VOLUMES, volume
    for container in spec["containers"] + spec.get("initContainers", []):
        sc = container.get("securityContext") or {}
        assert sc.get("allowPrivilegeEscalation") is False
        assert not sc.get("privileged")
        assert sc.get("capabilities", {}).get("drop") == ["ALL"]
        assert set(sc.get("capabilities", {}).get("add", [])) <= {"NET_BIND_SERVICE"}
        assert sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True
        assert sc.get("runAsUser", pod_sc.get("runAsUser", 1)) != 0
        seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile")) or {}
        assert seccomp.get("type") in ("RuntimeDefault", "Localhost")
        assert not container.get("ports") or all("hostPort" not in p for p in container["ports"])


def test_every_pod_meets_the_restricted_profile_of_its_namespace(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    for manifests in rendered.values():
        for job in jobs(manifests):
            assert_restricted(pod_spec(job))


def test_no_workload_pod_gets_a_service_account_token(
    rendered: dict[str, list[dict[str, Any]]], settings: dict[str, Any]
) -> None:
    """The training talks to no API: its pods mount no token (the smoke job's neither)."""
    smoke = tr.render_smoke(settings, "ns", "x", products=[], gpus=1)
    for manifests in [*rendered.values(), smoke]:
        for job in jobs(manifests):
            assert pod_spec(job)["automountServiceAccountToken"] is False


def test_gpu_containers_request_what_they_limit_and_run_with_the_nvidia_runtime(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    wanted = {
        "pytorch-single-gpu": "nvidia.com/gpu",
        "pytorch-ddp": "nvidia.com/gpu",
        "tensorflow-multiworker": "nvidia.com/gpu",
        "pytorch-time-sliced": "nvidia.com/gpu",
        "pytorch-mig": "nvidia.com/mig-1g.10gb",
        "smoke": "nvidia.com/gpu",
    }
    for name, manifests in rendered.items():
        (job,) = jobs(manifests)
        spec = pod_spec(job)
        assert spec["runtimeClassName"] == "nvidia"
        assert spec["restartPolicy"] == "Never"
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
            "tolerations"
        ]
        (container,) = spec["containers"]
        resources = container["resources"]
        assert resources["requests"] == resources["limits"], name
        assert resources["limits"][wanted[name]] == "1", name
        for value in resources["limits"].values():
            assert isinstance(value, str)
        assert job["spec"]["backoffLimit"] == 0
        assert job["spec"]["activeDeadlineSeconds"] > 0


def test_jobs_ask_for_h100_or_h200_with_80gb_or_more(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    for name in ("pytorch-single-gpu", "pytorch-ddp", "tensorflow-multiworker"):
        (job,) = jobs(rendered[name])
        exprs = expressions(pod_spec(job))
        assert exprs["nvidia.com/gpu.product"] == {
            "key": "nvidia.com/gpu.product",
            "operator": "In",
            "values": ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"],
        }
        assert exprs["nvidia.com/gpu.memory"] == {
            "key": "nvidia.com/gpu.memory",
            "operator": "Gt",
            "values": ["80000"],
        }


def test_ddp_job_rendezvous_on_index_zeros_stable_hostname(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    manifests = rendered["pytorch-ddp"]
    (job,) = jobs(manifests)
    (service,) = [m for m in manifests if m["kind"] == "Service"]
    spec = pod_spec(job)
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 2
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {"batch.kubernetes.io/job-name": job["metadata"]["name"]}
    # Pods of an indexed Job are named <job>-<index>; with subdomain = the headless Service they
    # resolve as <job>-<index>.<service>.
    assert spec["subdomain"] == service["metadata"]["name"]
    command = spec["containers"][0]["command"]
    assert command[0] == "torchrun"
    args = dict(a.split("=", 1) for a in command[1:-1])
    assert args["--master-addr"] == f"{job['metadata']['name']}-0.{service['metadata']['name']}"
    assert args["--nnodes"] == "2"
    assert args["--node-rank"] == "$(NODE_RANK)"
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )
    assert command[-1] == "/workload/train.py"


def test_tensorflow_workers_each_get_their_own_tf_config(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    manifests = rendered["tensorflow-multiworker"]
    (job,) = jobs(manifests)
    (service,) = [m for m in manifests if m["kind"] == "Service"]
    spec = pod_spec(job)
    env = spec["containers"][0]["env"]
    names = [e["name"] for e in env]
    # The kubelet expands $(NODE_RANK) only from variables defined before TF_CONFIG.
    assert names.index("NODE_RANK") < names.index("TF_CONFIG")
    template = next(e["value"] for e in env if e["name"] == "TF_CONFIG")
    workers = job["spec"]["completions"]
    for index in range(workers):
        config = json.loads(template.replace("$(NODE_RANK)", str(index)))
        assert config["task"] == {"type": "worker", "index": index}
        assert config["cluster"]["worker"] == [
            f"{job['metadata']['name']}-{i}.{service['metadata']['name']}:2222"
            for i in range(workers)
        ]
    assert spec["subdomain"] == service["metadata"]["name"]


def test_time_sliced_pods_share_a_node_and_ask_for_shared_gpus(
    settings: dict[str, Any], rendered: dict[str, list[dict[str, Any]]]
) -> None:
    (job,) = jobs(rendered["pytorch-time-sliced"])
    spec = pod_spec(job)
    assert job["spec"]["parallelism"] == 2
    exprs = expressions(spec)
    # Without renaming, GFD marks time-sliced GPUs with -SHARED.
    assert exprs["nvidia.com/gpu.product"]["values"] == [
        "NVIDIA-H100-80GB-HBM3-SHARED",
        "NVIDIA-H200-SHARED",
    ]
    assert exprs["nvidia.com/gpu.replicas"] == {
        "key": "nvidia.com/gpu.replicas",
        "operator": "Gt",
        "values": ["1"],
    }
    (term,) = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == {
        "batch.kubernetes.io/job-name": job["metadata"]["name"]
    }
    renamed = dict(settings, workload_shared_resource="nvidia.com/gpu.shared")
    (job,) = jobs(tr.pytorch_time_sliced(renamed, "vision"))
    spec = pod_spec(job)
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu.shared"] == "1"
    assert "nvidia.com/gpu" not in spec["containers"][0]["resources"]["limits"]
    assert expressions(spec)["nvidia.com/gpu.product"]["values"] == [
        "NVIDIA-H100-80GB-HBM3",
        "NVIDIA-H200",
    ]


def test_mig_job_asks_for_a_slice_on_mixed_strategy_nodes(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    (job,) = jobs(rendered["pytorch-mig"])
    exprs = expressions(pod_spec(job))
    assert exprs["nvidia.com/mig-1g.10gb.product"]["values"] == [
        "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
        "NVIDIA-H200-MIG-1g.10gb",
    ]
    assert exprs["nvidia.com/mig.strategy"]["values"] == ["mixed"]
    for value in exprs["nvidia.com/mig-1g.10gb.product"]["values"]:
        assert ts.gpu_product_error(value) is None


def test_the_training_scripts_are_python_and_print_the_pass_marker() -> None:
    for name, script in (("train.py", tr.PYTORCH_SCRIPT), ("tf.py", tr.TENSORFLOW_SCRIPT)):
        compile(script, name, "exec")
        assert '"KUBEGPU-TRAIN %s' in script
    assert tr.PASS_MARKER == "KUBEGPU-TRAIN PASS"


def test_every_job_mounts_the_script_it_runs(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for manifests in rendered.values():
        (job,) = jobs(manifests)
        (configmap,) = [m for m in manifests if m["kind"] == "ConfigMap"]
        spec = pod_spec(job)
        volume = next(v for v in spec["volumes"] if v["name"] == "script")
        assert volume["configMap"]["name"] == configmap["metadata"]["name"]
        assert tr.SCRIPT_KEY in configmap["data"]
        assert configmap["metadata"]["namespace"] == job["metadata"]["namespace"] == "vision"


def test_smoke_job_is_named_for_its_run_and_cleans_itself_up(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    configmap, job = rendered["smoke"]
    assert job["metadata"]["name"] == "kubegpu-smoke-abc123"
    assert configmap["metadata"]["name"] == "kubegpu-smoke-abc123-script"
    assert job["spec"]["ttlSecondsAfterFinished"] <= 600
    assert job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "smoke"
    exprs = expressions(pod_spec(job))
    assert exprs == {
        "nvidia.com/gpu.product": {
            "key": "nvidia.com/gpu.product",
            "operator": "In",
            "values": ["NVIDIA-H200"],
        }
    }
    any_gpu = tr.render_smoke(ts.validate_settings({})[0], "ns", "x", products=[], gpus=2)[1]
    assert "affinity" not in pod_spec(any_gpu)
    assert pod_spec(any_gpu)["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"


def test_image_registry_prefix_is_applied(settings: dict[str, Any]) -> None:
    mirrored = dict(settings, workload_image_registry="registry.internal:5000/mirror/")
    (job,) = jobs(tr.pytorch_single(mirrored, "vision"))
    assert pod_spec(job)["containers"][0]["image"] == (
        "registry.internal:5000/mirror/pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"
        "@sha256:c16f4c749e2d9e96878875cdf6cc45cddda1d1a36fddd371dd6f2360f1b6e2a2"
    )


# --- the committed examples ----------------------------------------------------------------------


def test_examples_and_dashboards_are_rendered_from_the_current_variables() -> None:
    files = workloads.render_examples(workloads.load_values(REPO / "examples" / "values.yml"))
    assert workloads.stale_files(REPO, files) == [], (
        "run `python -m kubegpu.workloads` and commit the result"
    )
    for rel, text in files.items():
        if rel.endswith(".yaml"):
            docs = [d for d in yaml.safe_load_all(text) if d]
            assert docs, rel
            for doc in docs:
                if doc["kind"] != "PrometheusRule":
                    assert kubernetes_validate.validate(doc, "1.35", strict=True) == "1.35"


def test_the_renderer_refuses_bad_values_naming_them(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"gpu_tenancy_tenants\[0\] \(Bad\)\.name"):
        workloads.render_examples({"gpu_tenancy_tenants": [{"name": "Bad"}]})
    values = tmp_path / "values.yml"
    values.write_text("gpu_tenancy_workload_nodes: 3\n")
    root = tmp_path / "repo"
    assert workloads.main(["--root", str(root), "--values", str(values)]) == 0
    ddp = yaml.safe_load_all((root / "examples/workloads/pytorch-ddp.yaml").read_text())
    job = next(d for d in ddp if d and d["kind"] == "Job")
    assert job["spec"]["completions"] == 3
    assert workloads.main(["--root", str(root), "--values", str(values), "--check"]) == 0
    (root / "dashboards/kubegpu-gpus.json").write_text("{}")
    assert workloads.main(["--root", str(root), "--values", str(values), "--check"]) == 1


# --- kubegpu smoke: inputs, before anything reaches a cluster --------------------------------------


def _kubeconfig(path: Path) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
                "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
            }
        )
    )
    return path


def test_a_kubeconfig_target_is_used_as_it_is(tmp_path: Path) -> None:
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig")
    target = smoke.resolve_target(kubeconfig)
    assert target == smoke.Target(kubeconfig=kubeconfig, source="kubeconfig")


def test_an_inventory_target_gives_kubeconfig_and_tenants(tmp_path: Path) -> None:
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig")
    (tmp_path / "inv" / "group_vars" / "all").mkdir(parents=True)
    (tmp_path / "inv" / "hosts.yml").write_text(
        "all:\n  hosts:\n    gpu1:\n      ansible_host: 192.0.2.21\n"
    )
    (tmp_path / "inv" / "group_vars" / "all" / "k.yml").write_text(
        yaml.safe_dump(
            {
                "kubegpu_kubeconfig": str(kubeconfig),
                "gpu_tenancy_kube_context": "c",
                "gpu_tenancy_tenants": [
                    {"name": "alpha", "gpus": {"nvidia.com/gpu": "2"}},
                    {"name": "beta", "gpu_products": ["NVIDIA-L40S"]},
                ],
            }
        )
    )
    target = smoke.resolve_target(tmp_path / "inv" / "hosts.yml")
    assert target.kubeconfig == kubeconfig and target.context == "c"
    assert target.source == "inventory"
    tenancy = workloads.settings(target.variables)
    assert smoke.choose_namespace(tenancy, None, None) == ("alpha", [])
    assert smoke.choose_namespace(tenancy, "beta", None) == ("beta", ["NVIDIA-L40S"])
    assert smoke.choose_namespace(tenancy, None, "other") == ("other", [])
    with pytest.raises(
        InputError, match=r"--tenant: 'gamma' is not a tenant \(allowed: alpha, beta\)"
    ):
        smoke.choose_namespace(tenancy, "gamma", None)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"workload": "jax"}, "--workload: 'jax' is not known"),
        ({"gpus": 0}, "--gpus: 0 is below 1"),
        ({"timeout_s": 0}, "--timeout: 0 is not positive"),
        ({}, "--namespace: no namespace given"),
        ({"namespace": "ns", "products": ["H100 PCIe"]}, r"--product\[0\]: 'H100 PCIe' has spaces"),
    ],
)
def test_bad_smoke_input_fails_before_any_api_call(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig")

    class NoClient:
        def __getattr__(self, name: str) -> Any:  # any use would be an API call
            raise AssertionError(f"the API was used: {name}")

    with pytest.raises(InputError, match=message):
        smoke.run_smoke(kubeconfig, api_client=NoClient(), **kwargs)


def test_a_missing_target_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"--inventory: .*does not exist"):
        smoke.resolve_target(tmp_path / "nope")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts: {}\n")
    with pytest.raises(InputError, match="kubegpu_kubeconfig: is not set"):
        smoke.resolve_target(inventory)


def test_the_smoke_subcommand_parses_its_options() -> None:
    parser = argparse.ArgumentParser()
    smoke.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        [
            "smoke",
            "--workload",
            "pytorch",
            "-i",
            "inv",
            "--tenant",
            "alpha",
            "--product",
            "NVIDIA-H200",
        ]
    )
    assert args.func is not None
    assert (args.inventory, args.tenant, args.product, args.gpus, args.timeout) == (
        "inv",
        "alpha",
        ["NVIDIA-H200"],
        1,
        900.0,
    )


def test_results_render_and_map_to_exit_codes() -> None:
    passed = smoke.SmokeResult(
        "pytorch",
        "alpha",
        "kubegpu-smoke-1",
        "passed",
        "KUBEGPU-TRAIN PASS rank=0/1",
        ("KUBEGPU-TRAIN PASS rank=0/1",),
        deleted=("Job alpha/kubegpu-smoke-1",),
    )
    assert smoke.exit_code(passed) == 0
    text = smoke.render(passed)
    assert re.search(r"PASS after \d+s", text) and "| KUBEGPU-TRAIN PASS" in text
    failed = smoke.SmokeResult("pytorch", "alpha", "j", "timeout", "gave up waiting")
    assert smoke.exit_code(failed) == 2 and "TIMEOUT" in smoke.render(failed)
    assert smoke.exit_code(smoke.SmokeResult("pytorch", "a", "j", "unreachable", "x")) == 3
    assert json.loads(json.dumps(passed.to_dict()))["passed"] is True
