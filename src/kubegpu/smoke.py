"""`kubegpu smoke`: run a short GPU training job in a tenant's namespace and report pass or fail.

run_smoke() submits the training script (a ConfigMap) and a Job that runs it on one GPU (the
gpu_tenancy settings: image, RuntimeClass, GPU taint, the tenant's GPU products), waits until the
job's pod ends or the timeout passes, reads the pod's last log lines and decides: it passed when
the pod succeeded and printed the script's pass line. Whatever happens, it deletes what it
created. It returns a SmokeResult and never prints; register() adds the `smoke` subcommand.

The target is a kubeconfig, or an inventory whose variables (for localhost) give
kubegpu_kubeconfig, the gpu_tenancy_* settings and the tenants.
"""

from __future__ import annotations

import argparse
import functools
import json
import secrets
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kubegpu.errors import InputError
from kubegpu.workloads import PREFIX, content_module, plain, settings

WORKLOADS = ("pytorch",)
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
EXIT_OK = 0
EXIT_FAILED = 2
EXIT_UNREACHABLE = 3

ProgressCallback = Callable[[str], None]


@dataclass(frozen=True)
class Target:
    """Where to run: a kubeconfig (and context), and the inventory's variables if any."""

    kubeconfig: Path
    context: str | None = None
    variables: dict[str, Any] = field(default_factory=dict)
    source: str = "kubeconfig"


@dataclass(frozen=True)
class SmokeResult:
    workload: str
    namespace: str
    job: str
    outcome: str  # passed, failed, timeout, unreachable
    detail: str
    log_tail: tuple[str, ...] = ()
    elapsed_s: float = 0.0
    deleted: tuple[str, ...] = ()
    cleanup_errors: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["passed"] = self.passed
        return data


# --- the target ------------------------------------------------------------------------------


def _is_kubeconfig(path: Path) -> bool:
    if not path.is_file():
        return False
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError):
        return False
    return isinstance(data, dict) and (
        data.get("kind") == "Config" or ("clusters" in data and "contexts" in data)
    )


def inventory_variables(path: Path) -> dict[str, Any]:
    """kubegpu_kubeconfig and the gpu_tenancy_* variables as the play on localhost sees them."""
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    try:
        inventory = InventoryManager(loader=loader, sources=[str(path)])
        variables = VariableManager(loader=loader, inventory=inventory).get_vars(
            host=inventory.get_host("localhost"), include_hostvars=False
        )
        templar = Templar(loader=loader, variables=variables)
        wanted = [k for k in variables if k == "kubegpu_kubeconfig" or k.startswith(PREFIX)]
        return {k: plain(templar.template(variables[k])) for k in wanted}
    except AnsibleError as exc:
        raise InputError(
            "--inventory",
            f"could not read the variables of {path}: {exc}",
            "an inventory or a kubeconfig",
        ) from exc


def resolve_target(path: str | Path, context: str | None = None) -> Target:
    """A kubeconfig file as it is, or an inventory's kubegpu_kubeconfig and gpu_tenancy_* vars."""
    path = Path(path)
    if not path.exists():
        raise InputError("--inventory", f"{path} does not exist", "an inventory or a kubeconfig")
    if _is_kubeconfig(path):
        return Target(kubeconfig=path, context=context)
    variables = inventory_variables(path)
    kubeconfig = str(variables.get("kubegpu_kubeconfig") or "")
    if not kubeconfig:
        raise InputError(
            "kubegpu_kubeconfig",
            f"is not set in the inventory {path}",
            "the path of the cluster's kubeconfig, or pass the kubeconfig itself with -i",
        )
    if not Path(kubeconfig).is_file():
        raise InputError("kubegpu_kubeconfig", f"{kubeconfig} is not a file", "a kubeconfig path")
    context = context or str(variables.get(PREFIX + "kube_context") or "") or None
    return Target(Path(kubeconfig), context, variables, source="inventory")


def choose_namespace(
    tenancy: dict[str, Any], tenant: str | None, namespace: str | None
) -> tuple[str, list[str]]:
    """(namespace, GPU products) from --namespace / --tenant and the inventory's tenants."""
    tenants = {t["name"]: t for t in tenancy["tenants"]}
    if tenant is not None:
        if tenant not in tenants:
            known = ", ".join(sorted(tenants)) or "none in the inventory"
            raise InputError("--tenant", f"{tenant!r} is not a tenant", known)
        return tenant, list(tenants[tenant]["gpu_products"])
    if namespace is not None:
        products = tenants[namespace]["gpu_products"] if namespace in tenants else []
        return namespace, list(products)
    if tenancy["tenants"]:
        first = tenancy["tenants"][0]
        return first["name"], list(first["gpu_products"])
    raise InputError(
        "--namespace",
        "no namespace given and the target defines no gpu_tenancy_tenants",
        "--namespace NAME or --tenant NAME",
    )


# --- the run ---------------------------------------------------------------------------------


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return dict(cond)
    return None


def _pod_summary(pod: dict[str, Any]) -> str:
    """Why a pod is where it is: scheduling message, container waiting or terminated reason."""
    status = pod.get("status") or {}
    parts = [f"pod {pod['metadata']['name']} {status.get('phase', 'Pending')}"]
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            parts.append(f"unschedulable: {cond.get('message') or cond.get('reason')}")
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if "waiting" in state and state["waiting"].get("reason"):
            waiting = state["waiting"]
            parts.append(
                f"{cs.get('name')} waiting: {waiting['reason']} {waiting.get('message', '')}"
            )
        if "terminated" in state:
            term = state["terminated"]
            parts.append(
                f"{cs.get('name')} exited {term.get('exitCode')} ({term.get('reason', '')})"
            )
    return "; ".join(p.strip() for p in parts)


class _Api:
    """The few API calls the smoke check makes, returning plain JSON data."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self.client = api_client
        # Any: the client is typed from 37 on (its typed models would refuse the plain dicts
        # and raw responses used here), untyped before.
        self.core: Any = client.CoreV1Api(api_client)
        self.batch: Any = client.BatchV1Api(api_client)

    @staticmethod
    def _json(response: Any) -> dict[str, Any]:
        data = json.loads(response.data)
        return dict(data)

    def create(self, manifest: dict[str, Any]) -> None:
        ns = manifest["metadata"]["namespace"]
        if manifest["kind"] == "ConfigMap":
            self.core.create_namespaced_config_map(ns, manifest)
        elif manifest["kind"] == "Job":
            self.batch.create_namespaced_job(ns, manifest)
        else:  # pragma: no cover - render_smoke makes only these two
            raise ValueError(f"unexpected kind {manifest['kind']}")

    def job(self, ns: str, name: str) -> dict[str, Any]:
        return self._json(self.batch.read_namespaced_job(name, ns, _preload_content=False))

    def pods(self, ns: str, job: str) -> list[dict[str, Any]]:
        data = self._json(
            self.core.list_namespaced_pod(
                ns, label_selector=f"{JOB_NAME_LABEL}={job}", _preload_content=False
            )
        )
        return list(data.get("items") or [])

    def log(self, ns: str, pod: str, lines: int) -> str:
        # The raw response, as job() and pods() read theirs: the 36.x client returns the text
        # of a log wrapped as "b'...'" (kubernetes-client/python#2596).
        response = self.core.read_namespaced_pod_log(
            pod, ns, tail_lines=lines, _preload_content=False
        )
        return bytes(response.data).decode("utf-8", "replace")


def _api_error(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if body:
        try:
            return str(json.loads(body).get("message") or body)
        except (ValueError, AttributeError):
            return str(body)
    return str(exc)


def _unreachable(exc: Exception) -> bool:
    from urllib3.exceptions import HTTPError as Urllib3Error

    return isinstance(exc, Urllib3Error | ConnectionError | OSError) and not hasattr(exc, "status")


def run_smoke(
    target: str | Path | Target,
    *,
    workload: str = "pytorch",
    tenant: str | None = None,
    namespace: str | None = None,
    image: str | None = None,
    gpus: int = 1,
    products: Sequence[str] | None = None,
    timeout_s: float = 900.0,
    poll_s: float = 2.0,
    log_lines: int = 20,
    context: str | None = None,
    api_client: Any = None,
    on_progress: ProgressCallback | None = None,
    run_id: str | None = None,
) -> SmokeResult:
    """Submit the smoke Job, wait for it (at most timeout_s), report, and always clean up.

    Bad input raises InputError before anything is created. products=None takes the tenant's
    allowed GPU products (any GPU when it names none); an empty list means any GPU.
    """
    if workload not in WORKLOADS:
        raise InputError("--workload", f"{workload!r} is not known", ", ".join(WORKLOADS))
    if gpus < 1:
        raise InputError("--gpus", f"{gpus} is below 1", "1 or more")
    if timeout_s <= 0:
        raise InputError("--timeout", f"{timeout_s} is not positive", "seconds, more than 0")
    resolved = target if isinstance(target, Target) else resolve_target(target, context)
    tenancy = settings(resolved.variables)
    ns, tenant_products = choose_namespace(tenancy, tenant, namespace)
    wanted = list(tenant_products if products is None else products)
    checks = content_module("tenancy_settings")
    for index, product in enumerate(wanted):
        error = checks.gpu_product_error(
            product, tuple(checks.KNOWN_GPU_PRODUCTS) + tuple(tenancy["extra_gpu_products"])
        )
        if error:
            raise InputError(f"--product[{index}]", str(error))
    run_id = run_id or secrets.token_hex(3)
    manifests: list[dict[str, Any]] = content_module("training").render_smoke(
        tenancy, ns, run_id, image=image, products=wanted, gpus=gpus, timeout_s=timeout_s + 60
    )
    job_name = manifests[1]["metadata"]["name"]

    def progress(text: str) -> None:
        if on_progress is not None:
            on_progress(text)

    if api_client is None:
        from kubernetes import config

        load: Any = config.new_client_from_config  # untyped in every client release
        try:
            api_client = load(
                config_file=str(resolved.kubeconfig), context=resolved.context or context
            )
        except config.ConfigException as exc:
            raise InputError(
                "kubeconfig", f"{resolved.kubeconfig} cannot be used: {exc}", "a valid kubeconfig"
            ) from exc
    api = _Api(api_client)
    started = time.monotonic()
    created: list[dict[str, Any]] = []
    outcome, detail = "failed", ""
    tail: tuple[str, ...] = ()
    try:
        for manifest in manifests:
            api.create(manifest)
            created.append(manifest)
            progress(f"created {manifest['kind']} {ns}/{manifest['metadata']['name']}")
        outcome, detail, tail = _wait(
            api, ns, job_name, started + timeout_s, poll_s, log_lines, progress
        )
    except Exception as exc:  # every failure becomes a result, then cleanup
        if _unreachable(exc):
            outcome, detail = "unreachable", f"API server unreachable: {exc}"
        else:
            outcome, detail = "failed", f"API error: {_api_error(exc)}"
    finally:
        deleted, cleanup_errors = _cleanup(api, ns, job_name, created, progress)
    return SmokeResult(
        workload=workload,
        namespace=ns,
        job=job_name,
        outcome=outcome,
        detail=detail,
        log_tail=tuple(tail),
        elapsed_s=round(time.monotonic() - started, 3),
        deleted=tuple(deleted),
        cleanup_errors=tuple(cleanup_errors),
    )


def _wait(
    api: _Api,
    ns: str,
    job_name: str,
    deadline: float,
    poll_s: float,
    log_lines: int,
    progress: ProgressCallback,
) -> tuple[str, str, tuple[str, ...]]:
    marker = str(content_module("training").PASS_MARKER)
    last_state = ""
    pod: dict[str, Any] | None = None
    while True:
        job = api.job(ns, job_name)
        pods = api.pods(ns, job_name)
        pods.sort(key=lambda p: str(p["metadata"].get("creationTimestamp") or ""))
        pod = pods[-1] if pods else None
        phase = ((pod or {}).get("status") or {}).get("phase", "")
        complete, failed = _condition(job, "Complete"), _condition(job, "Failed")
        state = _pod_summary(pod) if pod else "waiting for the Job's pod"
        if state != last_state:
            progress(state)
            last_state = state
        if phase in ("Succeeded", "Failed") or complete or failed:
            break
        if time.monotonic() >= deadline:
            tail = _log_tail(api, ns, pod, log_lines) if pod else ()
            why = (
                state if pod else "no pod was created for the Job (is the Job controller running?)"
            )
            return "timeout", f"gave up waiting: {why}", tail
        time.sleep(poll_s)
    tail = _log_tail(api, ns, pod, log_lines) if pod else ()
    succeeded = phase == "Succeeded" or (complete is not None and phase != "Failed")
    passed_line = next((line for line in tail if line.startswith(marker)), None)
    if succeeded and passed_line:
        return "passed", passed_line, tail
    if succeeded:
        return "failed", f"the pod succeeded but printed no line starting {marker!r}", tail
    reason = ""
    if failed:
        reason = f"Job failed: {failed.get('reason', '')} {failed.get('message', '')}".strip()
    return "failed", "; ".join(x for x in (state if pod else "", reason) if x), tail


def _log_tail(api: _Api, ns: str, pod: dict[str, Any] | None, lines: int) -> tuple[str, ...]:
    if pod is None:
        return ()
    try:
        text = api.log(ns, pod["metadata"]["name"], lines)
    except Exception as exc:  # a missing log is reported, not fatal
        return (f"(no log: {_api_error(exc)})",)
    return tuple(text.splitlines()[-lines:])


def _cleanup(
    api: _Api, ns: str, job_name: str, created: list[dict[str, Any]], progress: ProgressCallback
) -> tuple[list[str], list[str]]:
    """Delete the Job, its pods (also where no garbage collector runs) and the ConfigMap."""
    from kubernetes.client.exceptions import ApiException

    deleted, errors = [], []

    def attempt(what: str, call: Callable[[], Any]) -> None:
        try:
            call()
            deleted.append(what)
            progress(f"deleted {what}")
        except ApiException as exc:
            if exc.status != 404:
                errors.append(f"{what}: {_api_error(exc)}")
        except Exception as exc:  # report and go on with the rest
            errors.append(f"{what}: {exc}")

    kinds = {m["kind"] for m in created}
    if "Job" in kinds:
        attempt(
            f"Job {ns}/{job_name}",
            lambda: api.batch.delete_namespaced_job(job_name, ns, propagation_policy="Background"),
        )
    # Pods: once the Job was submitted they may exist, even if its create call reported an error.
    pods: list[dict[str, Any]] = []
    if created:
        try:
            pods = api.pods(ns, job_name)
        except Exception as exc:  # listed as a cleanup error
            errors.append(f"pods of {job_name}: {_api_error(exc)}")
    for pod in pods:
        name = pod["metadata"]["name"]
        attempt(f"Pod {ns}/{name}", functools.partial(api.core.delete_namespaced_pod, name, ns))
    for manifest in created:
        if manifest["kind"] == "ConfigMap":
            name = manifest["metadata"]["name"]
            attempt(
                f"ConfigMap {ns}/{name}",
                functools.partial(api.core.delete_namespaced_config_map, name, ns),
            )
    return deleted, errors


# --- the command -----------------------------------------------------------------------------


def exit_code(result: SmokeResult) -> int:
    if result.passed:
        return EXIT_OK
    if result.outcome == "unreachable":
        return EXIT_UNREACHABLE
    return EXIT_FAILED


def render(result: SmokeResult) -> str:
    verdict = {"passed": "PASS", "timeout": "TIMEOUT", "unreachable": "UNREACHABLE"}.get(
        result.outcome, "FAIL"
    )
    lines = [
        f"smoke {result.workload} in {result.namespace} (Job {result.job}): {verdict} "
        f"after {result.elapsed_s:.0f}s",
        f"  {result.detail}",
    ]
    if result.log_tail:
        lines.append(f"  last {len(result.log_tail)} log line(s):")
        lines.extend(f"    | {line}" for line in result.log_tail)
    if result.cleanup_errors:
        lines.append("  cleanup left things behind:")
        lines.extend(f"    {e}" for e in result.cleanup_errors)
    else:
        lines.append(f"  cleaned up: {', '.join(result.deleted) or 'nothing was created'}")
    return "\n".join(lines)


def _command(args: argparse.Namespace) -> int:
    progress = None
    if not args.json and not args.quiet:

        def progress(text: str) -> None:
            print(f"  .. {text}", file=sys.stderr, flush=True)

    result = run_smoke(
        args.inventory,
        workload=args.workload,
        tenant=args.tenant,
        namespace=args.namespace,
        image=args.image,
        gpus=args.gpus,
        products=args.product,
        timeout_s=args.timeout,
        context=args.context,
        on_progress=progress,
    )
    print(json.dumps(result.to_dict(), indent=2) if args.json else render(result))
    return exit_code(result)


def register(subparsers: Any) -> None:
    """Add `kubegpu smoke` to the CLI's subparsers; its func returns the exit code."""
    p = subparsers.add_parser(
        "smoke",
        help="run a short GPU training job in a tenant namespace and report pass or fail",
        description=(
            "Submit a small training job (the script in a ConfigMap, a Job on one GPU) to a "
            "tenant's namespace, wait for it, print pass or fail with the pod's last log lines, "
            "and delete what was created. Exit 0 on pass, 2 on fail or timeout, 3 when the API "
            "server cannot be reached, 4 on bad input."
        ),
    )
    p.add_argument(
        "-i",
        "--inventory",
        required=True,
        help="inventory (kubegpu_kubeconfig, tenants) or kubeconfig",
    )
    p.add_argument("-w", "--workload", default="pytorch", choices=WORKLOADS, help="what to run")
    p.add_argument("--tenant", help="tenant whose namespace and GPU products to use")
    p.add_argument("-n", "--namespace", help="namespace to run in (default: the first tenant's)")
    p.add_argument("--image", help="container image (default: gpu_tenancy_workload_pytorch_image)")
    p.add_argument("--gpus", type=int, default=1, help="GPUs for the job (default 1)")
    p.add_argument(
        "--product",
        action="append",
        help="require this nvidia.com/gpu.product (repeatable; default: the tenant's products)",
    )
    p.add_argument(
        "--timeout", type=float, default=900.0, help="seconds to wait for the job (default 900)"
    )
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress while waiting")
    p.set_defaults(func=_command)
