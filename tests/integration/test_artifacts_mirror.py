"""`kubegpu artifacts list|check` against a real mirror: Debian's registry (distribution 2.8)
holding multi-platform images pushed with skopeo, and the testbed's signed apt repository of the
toolkit's packages (NVIDIA's programs built from its Go module, libnvidia-container as test
doubles) served over HTTP, both on loopback.

The images are small ones built here under the manifest's paths and tags (NVIDIA's registry is
not reachable); their digests are computed here and must be what the registry serves, so the
digest reading that scripts/refresh-artifact-digests does is checked too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubegpu.testbed import aptrepo
from tests import registry as reg
from tests.integration.conftest import toolkit_purge_script
from tests.processes import die_with_parent, free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.kubegpu.gpu.plugins.module_utils import artifacts  # noqa: E402

pytestmark = pytest.mark.skipif(reg.available() is not None, reason=str(reg.available()))
MANIFEST = artifacts.load()
IMAGES = len(MANIFEST["images"])


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The registry with every manifest image (multi-platform, under its path and tag) and the
    apt repository; their addresses and the digests computed here."""
    work = tmp_path_factory.mktemp("mirror")
    registry = reg.start(work / "registry")
    server = None
    try:
        digests, layouts = {}, {}
        for image in MANIFEST["images"]:
            layout = layouts[image["name"]] = work / "layouts" / image["name"]
            digests[image["name"]] = reg.oci_index_layout(layout, image["name"], image["platforms"])
            registry.push(layout, image["path"], image["tag"])
        repo = aptrepo.build_repo(work / "apt")
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
            cwd=repo.root,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        apt_url = f"http://127.0.0.1:{port}/{aptrepo.REPO_PATH}/{aptrepo.FLAT_DIR}"
        wait_for("the apt repository", lambda: _get(apt_url + "/Packages"), timeout_s=30)
        yield {
            "registry": registry,
            "digests": digests,
            "layouts": layouts,
            "apt": apt_url.replace("amd64", "$(ARCH)"),
        }
    finally:
        if server:
            server.terminate()
        registry.stop()


def _get(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def mirrored_images(mirror: dict[str, Any]) -> dict[str, Any]:
    """The registry and digest variables of every image the manifest picks by them, pointing at
    the mirror and at the digest it serves."""
    found: dict[str, Any] = {}
    for image in MANIFEST["images"]:
        settings = image["settings"]
        if "registry" in settings and "ref" not in settings:
            found[settings["registry"]] = mirror["registry"].address
            if "digest" in settings:
                found[settings["digest"]] = mirror["digests"][image["name"]][0]
    return found


def inventory(
    folder: Path, mirror: dict[str, Any], localhost: dict[str, Any] | None = None, **overrides: Any
) -> Path:
    """An inventory of two GPU nodes (never contacted) that points every source at the mirror
    and pins each image at the digest the mirror serves."""
    address = mirror["registry"].address
    digests = mirror["digests"]
    pytorch = next(i for i in MANIFEST["images"] if i["name"] == "pytorch")
    tensorflow = next(i for i in MANIFEST["images"] if i["name"] == "tensorflow")
    variables = {
        **mirrored_images(mirror),
        "gpu_tenancy_workload_image_registry": address,
        "gpu_tenancy_workload_pytorch_image": (
            f"{pytorch['path']}:{pytorch['tag']}@{digests['pytorch'][0]}"
        ),
        "gpu_tenancy_workload_tensorflow_image": f"{tensorflow['path']}:{tensorflow['tag']}",
        "nvidia_container_toolkit_repo_url": mirror["apt"],
        "kubegpu_artifacts_plain_http_registries": [address],
        # DRA on (for the nodes that carry its label): every image of the manifest is pulled.
        "gpu_cluster_allocation": "dra",
        **overrides,
    }
    (folder / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    (folder / "group_vars" / "all" / "mirror.yml").write_text(yaml.safe_dump(variables))
    hosts: dict[str, Any] = {
        "all": {"children": {"gpu_nodes": {"hosts": {"gpu1": {}, "gpu2": {}}}}}
    }
    if localhost is not None:
        hosts["all"]["hosts"] = {
            "localhost": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
            }
        }
    (folder / "hosts.yml").write_text(yaml.safe_dump(hosts))
    return folder


def kubegpu(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubegpu", *args], capture_output=True, text=True, timeout=120
    )


def test_the_registry_serves_each_image_at_the_digests_computed_here(
    mirror: dict[str, Any],
) -> None:
    """What scripts/refresh-artifact-digests reads: the index digest and each platform's."""
    import urllib.request

    for image in MANIFEST["images"]:
        index, platforms = artifacts.resolve_digests(
            urllib.request.urlopen, mirror["registry"].address, image["path"], image["tag"], "http"
        )
        assert (index, platforms) == mirror["digests"][image["name"]], image["name"]
        assert sorted(platforms) == sorted(image["platforms"])


def test_check_finds_every_artifact_the_inventory_pulls(
    mirror: dict[str, Any], tmp_path: Path
) -> None:
    inv = inventory(tmp_path, mirror)
    listed = kubegpu("artifacts", "list", "-i", str(inv), "--json")
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    address = mirror["registry"].address
    assert [i["reference"].split("/")[0] for i in data["images"]] == [address] * IMAGES
    toolkit = [p for p in data["packages"] if p["group"] == "nvidia-container-toolkit"]
    assert {(p["name"], p["version"]) for p in toolkit} == {
        (name, "1.20.2-1") for name in MANIFEST["packages"][0]["names"]
    }
    run = kubegpu("artifacts", "check", "-i", str(inv))
    assert run.returncode == 0, run.stdout + run.stderr
    # Every image and the toolkit's 4 packages; the driver's come from the OS's own sources.
    driver = [p for p in data["packages"] if p["group"] == "nvidia-driver"]
    total = IMAGES + 4
    assert run.stdout.strip().splitlines()[-1] == (
        f"{total} of {total} artifacts found on the mirrors, 0 missing ({len(driver)} driver"
        " packages come from the OS's own sources, not asked)"
    )


def test_check_names_each_missing_image_and_package(mirror: dict[str, Any], tmp_path: Path) -> None:
    """An image whose digest the mirror lacks, and a toolkit version it does not carry."""
    other = "sha256:" + "0" * 64
    inv = inventory(
        tmp_path,
        mirror,
        gpu_cluster_dcgm_exporter_digest=other,
        nvidia_container_toolkit_version="1.19.0-1",
    )
    run = kubegpu("artifacts", "check", "-i", str(inv))
    assert run.returncode == 2, run.stdout + run.stderr
    lines = run.stdout.strip().splitlines()
    dcgm = next(i for i in MANIFEST["images"] if i["name"] == "dcgm-exporter")
    address = mirror["registry"].address
    assert (
        f"missing image {address}/{dcgm['path']}:{dcgm['tag']}@{other}: not in the registry"
        in "\n".join(lines)
    )
    toolkit = [line for line in lines if line.startswith("missing package")]
    assert len(toolkit) == 4
    assert all(
        "=1.19.0-1: not in the mirror's index (the mirror has 1.17.8-1, 1.20.2-1)" in line
        for line in toolkit
    )
    total = IMAGES + 4
    assert lines[-1].startswith(f"{total - 5} of {total} artifacts found on the mirrors, 5 missing")


def test_an_image_deleted_from_the_mirror_is_named(mirror: dict[str, Any], tmp_path: Path) -> None:
    """Taken away through the registry's own API: check names that image and only it."""
    tensorflow = next(i for i in MANIFEST["images"] if i["name"] == "tensorflow")
    registry = mirror["registry"]
    registry.delete(tensorflow["path"], mirror["digests"]["tensorflow"][0])
    try:
        run = kubegpu("artifacts", "check", "-i", str(inventory(tmp_path, mirror)))
        assert run.returncode == 2
        missing = [line for line in run.stdout.splitlines() if line.startswith("missing")]
        assert missing == [
            f"missing image {registry.address}/{tensorflow['path']}:{tensorflow['tag']}: not in "
            f"the registry (http://{registry.address}/v2/{tensorflow['path']}/manifests/"
            f"{tensorflow['tag']} answered 404)"
        ]
    finally:
        registry.push(mirror["layouts"]["tensorflow"], tensorflow["path"], tensorflow["tag"])


def test_refresh_writes_the_digests_the_registry_serves(
    mirror: dict[str, Any], tmp_path: Path
) -> None:
    """scripts/refresh-artifact-digests --write on a copy of the manifest: every image's digest
    and platform digests become the registry's, and nothing else in the file changes."""
    copy = tmp_path / "artifacts.yaml"
    original = (ROOT / "plugins/module_utils/data/artifacts.yaml").read_text()
    copy.write_text(original)
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts/refresh-artifact-digests"),
            "--write",
            "--registry",
            mirror["registry"].address,
            "--plain-http",
            "--manifest",
            str(copy),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    names = [image["name"] for image in MANIFEST["images"]]
    assert json.loads(run.stdout.splitlines()[-1]) == {"changed": names, "failed": []}
    refreshed = yaml.safe_load(copy.read_text())
    for image in refreshed["images"]:
        index, platforms = mirror["digests"][image["name"]]
        assert (image["digest"], image["platform_digests"]) == (index, platforms)
    # Only the digest lines differ: comments, order and the other fields are kept.
    before = [line for line in original.splitlines() if "digest" not in line]
    after = [line for line in copy.read_text().splitlines() if "digest" not in line]
    assert before == after


def preflight(inv: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """The preflight playbook's controller play only (--limit localhost): the GPU nodes of the
    inventory are never contacted."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), KUBEGPU_ACCEL="0")
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(inv),
            str(ROOT / "playbooks/preflight.yml"),
            "--limit",
            "localhost",
            "-e",
            "kubegpu_offline=true",
            "-v",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )


def test_offline_preflight_stops_naming_what_the_mirror_lacks(
    mirror: dict[str, Any], tmp_path: Path
) -> None:
    """kubegpu_offline: true makes preflight ask the mirrors first; an image whose digest the
    mirror lacks stops the run on the controller, named, before any node is contacted."""
    good = preflight(inventory(tmp_path / "good", mirror, localhost={}))
    assert good.returncode == 0, good.stdout[-3000:] + good.stderr[-2000:]
    total = IMAGES + 4
    assert f"{total} of {total} artifacts found on the mirrors, 0 missing" in good.stdout
    other = "sha256:" + "1" * 64
    bad = preflight(
        inventory(tmp_path / "bad", mirror, localhost={}, gpu_cluster_device_plugin_digest=other)
    )
    assert bad.returncode == 2, bad.stdout[-3000:]
    plugin = next(i for i in MANIFEST["images"] if i["name"] == "k8s-device-plugin")
    address = mirror["registry"].address
    assert f"missing image {address}/{plugin['path']}:{plugin['tag']}@{other}" in bad.stdout
    recap = bad.stdout[bad.stdout.index("PLAY RECAP") :]
    assert "localhost" in recap and "failed=1" in recap
    assert "gpu1" not in recap and "gpu2" not in recap


TOOLKIT = MANIFEST["packages"][0]["names"]
TOOLKIT_FILES = (
    "/etc/apt/sources.list.d/kubegpu-nvidia-container-toolkit.sources",
    "/etc/apt/preferences.d/kubegpu-nvidia-container-toolkit",
    "/etc/apt/keyrings/kubegpu-nvidia-container-toolkit.gpg",
    "/etc/apt/keyrings/kubegpu-nvidia-container-toolkit.asc",
)


def _site(testbed: Any, node: str, tmp: Path, variables: dict[str, Any]) -> Any:
    """site.yml, the toolkit layer, on one testbed node (and the controller's plays)."""
    extra = tmp / f"offline-{len(list(tmp.glob('offline-*')))}.json"
    extra.write_text(json.dumps(variables))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(testbed.inventory),
            "-i",
            str(ROOT / "inventories" / "testbed"),
            str(ROOT / "site.yml"),
            "--tags",
            "toolkit",
            "--limit",
            f"{node},localhost",
            "-e",
            f"@{extra}",
        ],
        capture_output=True,
        text=True,
        timeout=1200,
        env=env,
        cwd=ROOT,
    )


def _recap(out: str) -> dict[str, str]:
    lines = out[out.index("PLAY RECAP") :].splitlines()[1:]
    return {line.split()[0]: line for line in lines if ":" in line and "ok=" in line}


def test_an_offline_converge_asks_the_mirrors_first_and_installs_from_them(
    mirror: dict[str, Any], testbed: Any, tmp_path: Path
) -> None:
    """kubegpu_offline on testbed nodes: with a digest the registry lacks, preflight stops on
    the controller naming it and no node is contacted; with the mirrors complete, the toolkit
    layer installs from the testbed's signed repository (the mirror), and the next run changes
    nothing. The images are asked of the loopback registry; the packages of the mirror the
    nodes use."""
    node = testbed.node_names[0]
    ssh = lambda script: subprocess.run(  # noqa: E731
        testbed.ssh_argv(node, script), capture_output=True, text=True, timeout=300
    )
    address = mirror["registry"].address
    offline = {
        "kubegpu_offline": True,
        "kubegpu_artifacts_plain_http_registries": [address],
        **mirrored_images(mirror),
        "gpu_tenancy_workload_image_registry": address,
        "gpu_tenancy_workload_pytorch_image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime@"
        + mirror["digests"]["pytorch"][0],
    }
    # The nodes are shared by the session: another test may have left the toolkit installed,
    # or a source of the testbed's repository under another keyring (which apt refuses next to
    # the role's). Start from a node with neither, and leave it so.
    clean = (
        toolkit_purge_script(testbed.vendor_repo_url, TOOLKIT)
        + f"; rm -f {' '.join(TOOLKIT_FILES)} /var/lib/kubegpu/keys/kubegpu-nvidia-container-toolkit.*"
    )
    assert ssh(clean).returncode == 0
    try:
        other = "sha256:" + "2" * 64
        bad = _site(testbed, node, tmp_path, dict(offline, gpu_cluster_dcgm_exporter_digest=other))
        assert bad.returncode != 0
        assert f"missing image {address}/nvidia/k8s/dcgm-exporter:" in bad.stdout, bad.stdout[
            -3000:
        ]
        assert node not in _recap(bad.stdout), bad.stdout[-2000:]

        good = _site(testbed, node, tmp_path, offline)
        assert good.returncode == 0, good.stdout[-4000:]
        source = ssh(f"cat {TOOLKIT_FILES[0]}").stdout
        uris = [
            line.split(":", 1)[1].strip()
            for line in source.splitlines()
            if line.startswith("URIs:")
        ]
        assert uris == [testbed.vendor_repo_url + "/stable/deb/$(ARCH)"], source
        versions = ssh("dpkg-query -W -f='${Package} ${Version}\\n' " + " ".join(TOOLKIT)).stdout
        assert sorted(versions.split("\n")[:-1]) == sorted(f"{p} 1.20.2-1" for p in TOOLKIT)
        again = _site(testbed, node, tmp_path, offline)
        assert again.returncode == 0, again.stdout[-3000:]
        assert "changed=0" in _recap(again.stdout)[node], again.stdout[-3000:]
    finally:
        ssh(clean)
