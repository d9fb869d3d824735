"""A real container registry for the tests: Debian's `docker-registry` (distribution 2.8), with
images built here and pushed by `skopeo`, the client mirror tools use.

- start(workdir, address): the registry serving plain HTTP on address:port, storage under
  workdir, deletes allowed (so a test can take an image away); stop() ends it.
- oci_index_layout(folder, name, platforms): an OCI image layout of one multi-platform image:
  an index over one image manifest per platform, each with a small gzip layer saying which
  platform it is. Returns the index digest and each platform's manifest digest, computed here.
- Registry.push(layout, path, tag): skopeo copies the whole index (--all, digests preserved).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.processes import die_with_parent, free_port, tail, wait_for

REGISTRY = "/usr/bin/docker-registry"
SKOPEO = "/usr/bin/skopeo"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


class RegistryError(RuntimeError):
    pass


def available() -> str | None:
    """None when the registry and skopeo are installed, else what is missing."""
    missing = [p for p in (REGISTRY, SKOPEO) if not Path(p).exists()]
    return ("not installed: " + ", ".join(missing)) if missing else None


def _blob(blobs: Path, data: bytes, media_type: str) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def oci_index_layout(folder: Path, name: str, platforms: list[str]) -> tuple[str, dict[str, str]]:
    """An OCI layout at folder: (index digest, {platform: manifest digest})."""
    shutil.rmtree(folder, ignore_errors=True)
    blobs = folder / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    entries, by_platform = [], {}
    for platform in platforms:
        os_name, arch = platform.split("/")[:2]
        text = f"{name} for {platform} (kubegpu test image)\n".encode()
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
            info = tarfile.TarInfo("etc/kubegpu-test-image")
            info.size, info.mode = len(text), 0o644
            tar.addfile(info, io.BytesIO(text))
        layer_tar = raw.getvalue()
        layer = _blob(
            blobs, gzip.compress(layer_tar, mtime=0), "application/vnd.oci.image.layer.v1.tar+gzip"
        )
        config = {
            "architecture": arch,
            "os": os_name,
            "rootfs": {
                "type": "layers",
                "diff_ids": ["sha256:" + hashlib.sha256(layer_tar).hexdigest()],
            },
            "config": {},
        }
        config_desc = _blob(
            blobs, json.dumps(config).encode(), "application/vnd.oci.image.config.v1+json"
        )
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": config_desc,
            "layers": [layer],
        }
        desc = _blob(blobs, json.dumps(manifest).encode(), OCI_MANIFEST)
        desc["platform"] = {"architecture": arch, "os": os_name}
        entries.append(desc)
        by_platform[platform] = str(desc["digest"])
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}
    index_desc = _blob(blobs, json.dumps(index).encode(), OCI_INDEX)
    (folder / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    (folder / "index.json").write_text(
        json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [index_desc]})
    )
    return str(index_desc["digest"]), by_platform


@dataclass
class Registry:
    address: str  # host:port
    workdir: Path
    process: subprocess.Popen[bytes]

    def push(self, layout: Path, path: str, tag: str) -> None:
        policy = self.workdir / "policy.json"
        policy.write_text(json.dumps({"default": [{"type": "insecureAcceptAnything"}]}))
        run = subprocess.run(
            [
                SKOPEO,
                "--policy",
                str(policy),
                "copy",
                "--all",
                "--preserve-digests",
                "--dest-tls-verify=false",
                f"oci:{layout}",
                f"docker://{self.address}/{path}:{tag}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if run.returncode:
            raise RegistryError(f"skopeo copy to {path}:{tag} failed: {run.stderr.strip()}")

    def delete(self, path: str, digest: str) -> None:
        url = f"http://{self.address}/v2/{path}/manifests/{digest}"
        with urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=10) as r:
            if r.status != 202:
                raise RegistryError(f"DELETE {url} answered {r.status}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


def start(workdir: Path, address: str = "127.0.0.1") -> Registry:
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = workdir / "config.yml"
    config.write_text(
        json.dumps(
            {
                "version": 0.1,
                "log": {"level": "info"},
                "storage": {
                    "filesystem": {"rootdirectory": str(workdir / "data")},
                    "delete": {"enabled": True},
                },
                "http": {"addr": f"{address}:{port}"},
            }
        )
    )
    log = workdir / "registry.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [REGISTRY, "serve", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )

    def ready() -> bool:
        if process.poll() is not None:
            raise RegistryError("the registry exited: " + tail(log))
        try:
            with urllib.request.urlopen(f"http://{address}:{port}/v2/", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
            return False

    try:
        wait_for("the registry answering /v2/", ready, timeout_s=30)
    except Exception:
        process.kill()
        raise
    return Registry(f"{address}:{port}", workdir, process)
