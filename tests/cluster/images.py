"""Container images for the test cluster, built here from binaries (no registry is reachable).

- pause: Kubernetes' own `build/pause/linux/pause.c` from the k8s.io/kubernetes module at the
  release go.mod pins, compiled static with the flags of its Makefile (`-Os -static`, the
  version of its TAG), the sandbox every pod starts with;
- shell: Debian's `busybox-static` (downloaded with apt-get, the machine's own sources), its
  binary and a link per applet, for pods that run a command; the same with extra files on top
  for a test's stand-in (e.g. the smoke check's TEST DOUBLE of the PyTorch image).

Each is written as an OCI image layout archive (one uncompressed layer, amd64/linux) that
`ctr -n k8s.io images import` loads under the image name given; the archives are cached under
the cluster cache, keyed on their inputs.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import tarfile
import tempfile
from pathlib import Path

from tests.cluster.build import DEFAULT_CACHE, DEFAULT_GOMODCACHE, SRC, module_version

PAUSE_TAG_RE = re.compile(r"^TAG \?= (\S+)$", re.M)


def _layer(files: dict[str, tuple[bytes, int]], links: dict[str, str]) -> bytes:
    """A reproducible tar: regular files (content, mode) and symbolic links, owned by root."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted({str(Path(p).parent) for p in [*files, *links]} - {"."})
        for name in dirs:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, (content, mode) in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), mode
            tar.addfile(info, io.BytesIO(content))
        for name, target in sorted(links.items()):
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            tar.addfile(info)
    return buf.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes, media_type: str) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def write_oci_archive(path: Path, name: str, layer: bytes, config: dict[str, object]) -> Path:
    """An OCI image layout archive of one layer, named ``name`` for `ctr images import`."""
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}"]},
    }
    partial = path.with_suffix(".partial")
    partial.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
        layer_desc = _blob(tar, layer, "application/vnd.oci.image.layer.v1.tar")
        config_desc = _blob(
            tar, json.dumps(image_config).encode(), "application/vnd.oci.image.config.v1+json"
        )
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config_desc,
            "layers": [layer_desc],
        }
        manifest_desc = _blob(
            tar, json.dumps(manifest).encode(), "application/vnd.oci.image.manifest.v1+json"
        )
        manifest_desc["annotations"] = {
            "io.containerd.image.name": name,
            "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
        }
        manifest_desc["platform"] = {"architecture": "amd64", "os": "linux"}
        for member, data in (
            ("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode()),
            (
                "index.json",
                json.dumps(
                    {
                        "schemaVersion": 2,
                        "mediaType": "application/vnd.oci.image.index.v1+json",
                        "manifests": [manifest_desc],
                    }
                ).encode(),
            ),
        ):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    partial.rename(path)
    return path


def _kubernetes_source(gomodcache: Path = Path(DEFAULT_GOMODCACHE)) -> Path:
    version = module_version((SRC / "go.mod").read_text(), "k8s.io/kubernetes")
    source = gomodcache / f"k8s.io/kubernetes@{version}"
    if not (source / "build/pause/linux/pause.c").is_file():
        raise FileNotFoundError(f"{source}/build/pause: run tests/cluster/build.py first")
    return source


def pause_archive(name: str, cache: Path = Path(DEFAULT_CACHE)) -> Path:
    """Kubernetes' pause, compiled static here, as an archive named ``name``."""
    source = _kubernetes_source() / "build/pause"
    match = PAUSE_TAG_RE.search((source / "Makefile").read_text())
    tag = match.group(1) if match else "HEAD"
    key = hashlib.sha256((source / "linux/pause.c").read_bytes() + name.encode()).hexdigest()[:16]
    archive = cache / "images" / f"pause-{key}.tar"
    if archive.is_file():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        binary = Path(tmp) / "pause"
        flags = ["-Os", "-Wall", "-Werror", "-static", f"-DVERSION=v{tag}-kubegpu-test"]
        subprocess.run(
            ["gcc", *flags, "-o", str(binary), str(source / "linux/pause.c")],
            check=True,
            capture_output=True,
        )
        layer = _layer({"pause": (binary.read_bytes(), 0o755)}, {})
    return write_oci_archive(
        archive, name, layer, {"Entrypoint": ["/pause"], "User": "65535:65535"}
    )


def shell_archive(
    name: str,
    cache: Path = Path(DEFAULT_CACHE),
    extra: dict[str, tuple[bytes, int]] | None = None,
) -> Path:
    """Debian's busybox-static with a link per applet, and ``extra`` files (path in the image
    without the leading slash: content and mode), as an archive named ``name``."""
    extra = extra or {}
    folder = cache / "images"
    folder.mkdir(parents=True, exist_ok=True)
    debs = sorted(folder.glob("busybox-static_*.deb"))
    if not debs:
        subprocess.run(
            ["apt-get", "download", "-q", "busybox-static"],
            cwd=folder,
            check=True,
            capture_output=True,
        )
        debs = sorted(folder.glob("busybox-static_*.deb"))
    deb = debs[-1]
    digest = hashlib.sha256(deb.name.encode() + name.encode())
    for path, (content, mode) in sorted(extra.items()):
        digest.update(f"{path}:{mode}:".encode() + hashlib.sha256(content).digest())
    key = digest.hexdigest()[:16]
    archive = folder / f"shell-{key}.tar"
    if archive.is_file():
        return archive
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["dpkg-deb", "-x", str(deb), tmp], check=True)
        busybox = Path(tmp) / "bin/busybox"
        applets = subprocess.run(
            [str(busybox), "--list"], check=True, capture_output=True, text=True
        ).stdout.split()
        layer = _layer(
            {"bin/busybox": (busybox.read_bytes(), 0o755), **extra},
            {f"bin/{a}": "busybox" for a in applets if a != "busybox"},
        )
    return write_oci_archive(archive, name, layer, {"Cmd": ["/bin/sh"], "Env": ["PATH=/bin"]})
