# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of kubegpu.gpu.nvidia_pci_facts: the module's facts, without Python on
the node when the connection pipelines.

One sh script reads what the module reads on the node (the PCI functions' vendor and class, and
for NVIDIA's the device ids and driver links; the product name, the loaded modules, the NVIDIA
module's version, the Secure Boot variable or mokutil, and the asked file states), and the
module's own code (module_utils/nvidia_pci.py) builds the facts from those answers on the
controller. Where the connection does not pipeline, an option needs the node to expand it (~ or
$), or the code asks something the script did not read, the module runs."""

from __future__ import annotations

import base64
import os
import typing as t

from ansible_collections.kubegpu.gpu.plugins.module_utils import nvidia_pci as pci
from ansible_collections.kubegpu.gpu.plugins.plugin_utils import checks as kchecks
from ansible_collections.kubegpu.gpu.plugins.plugin_utils.piped import (
    B64_HELPERS,
    PipedAction,
    Unanswered,
    answered,
    b64_text,
)

# $1 host_root, $2 "1" to ask mokutil (host_root is /), $3 the Secure Boot EFI variable's
# name, $4 the certificate to test with mokutil --test-key (or empty), then the file_states
# paths. Per PCI
# function "d NAME ATTR VALUE" (the attribute's first line, read by the shell itself: no process
# per file) or "dn NAME ATTR" (unreadable), and "l NAME TARGET" or "ln NAME" for the driver
# link; "file KEY B64", "nofile KEY", "dir KEY 0|1", "mokutil B64", "nomokutil", "moktest B64",
# "nomoktest" and
# "state B64PATH TYPE MODE UID GID [SHA256]" or "nostate B64PATH".
_SCRIPT = (
    B64_HELPERS
    + r"""
root=${1%/} ask_mokutil=$2 secure_boot_var=$3 mok_cert=$4
shift 4
[ -d "${root:-/}" ] && echo 'root 1' || echo 'root 0'
file() {
  if [ -f "$2" ] && [ -r "$2" ]; then printf 'file %s %s\n' "$1" "$(base64 -w0 < "$2")"
  else printf 'nofile %s\n' "$1"; fi
}
dir() { [ -d "$2" ] && printf 'dir %s 1\n' "$1" || printf 'dir %s 0\n' "$1"; }
attr() {
  if [ -r "$2/$3" ] && { IFS= read -r value < "$2/$3" || [ -n "$value" ]; }; then
    printf 'd %s %s %s\n' "$1" "$3" "$value"
  else
    printf 'dn %s %s\n' "$1" "$3"
  fi
}
devices=$root/sys/bus/pci/devices
if [ -d "$devices" ] && [ -r "$devices" ] && [ -x "$devices" ]; then
  echo 'ls 1'
  for path in "$devices"/*; do
    [ -e "$path" ] || [ -L "$path" ] || continue
    name=${path##*/}
    value=
    attr "$name" "$path" vendor
    vendor=$value
    attr "$name" "$path" class
    case $vendor in
      0x10de|0x10DE)
        for a in device subsystem_vendor subsystem_device; do attr "$name" "$path" "$a"; done
        if [ -L "$path/driver" ]; then printf 'l %s %s\n' "$name" "$(readlink "$path/driver")"
        else printf 'ln %s\n' "$name"; fi ;;
    esac
  done
else
  echo 'ls 0'
fi
file product "$root/sys/class/dmi/id/product_name"
file modules "$root/proc/modules"
file version "$root/proc/driver/nvidia/version"
dir nouveau "$root/sys/module/nouveau"
dir nvidia "$root/sys/module/nvidia"
dir efi "$root/sys/firmware/efi"
efivar=$root/sys/firmware/efi/efivars/$secure_boot_var
if [ -d "$root/sys/firmware/efi" ]; then
  file efivar "$efivar"
  if [ "$ask_mokutil" = 1 ] && ! [ -r "$efivar" ]; then
    mokutil=$(PATH=$PATH:/sbin:/usr/sbin:/usr/local/sbin command -v mokutil)
    if [ -n "$mokutil" ]; then printf 'mokutil %s\n' "$(b64 "$(LC_ALL=C "$mokutil" --sb-state 2>&1)")"
    else echo nomokutil; fi
  fi
  if [ "$ask_mokutil" = 1 ] && [ -n "$mok_cert" ]; then
    mokutil=$(PATH=$PATH:/sbin:/usr/sbin:/usr/local/sbin command -v mokutil)
    if [ -n "$mokutil" ]; then
      printf 'moktest %s\n' "$(b64 "$(LC_ALL=C "$mokutil" --test-key "$mok_cert" 2>&1)")"
    else echo nomoktest; fi
  fi
fi
for p in "$@"; do
  if [ -L "$p" ]; then kind=link
  elif [ -f "$p" ]; then kind=file
  elif [ -d "$p" ]; then kind=directory
  elif [ -e "$p" ]; then kind=other
  else printf 'nostate %s\n' "$(b64 "$p")"; continue
  fi
  owner=$(stat -c '%a %u %g' -- "$p") || exit 4
  sum=
  if [ "$kind" = file ]; then
    if sum=$(sha256sum < "$p" 2>/dev/null); then sum=${sum%% *}; else kind=other sum=; fi
  fi
  printf 'state %s %s %s %s\n' "$(b64 "$p")" "$kind" "$owner" "$sum"
done
"""
)

_ARGUMENT_SPEC: dict[str, t.Any] = {
    "host_root": {"type": "str", "default": "/"},
    "kernel_module_type": {"type": "str", "choices": ["auto", "open", "proprietary"]},
    "branch": {"type": "str"},
    "file_states": {"type": "list", "elements": "str", "default": []},
    "mok_certificate": {"type": "str"},
}


class _Answers:
    """A reader for module_utils/nvidia_pci.py that answers from what the script read."""

    def __init__(self, stdout: str, root: str) -> None:
        self.root_is_dir = False
        self._files: dict[str, str | None] = {}
        self._binary: dict[str, bytes | None] = {}
        self._links: dict[str, str | None] = {}
        self._dirs: dict[str, bool] = {}
        self._states: dict[str, dict[str, t.Any] | None] = {}
        # The functions' names in the order the script listed them (a dict keeps the order and
        # finds a name again in constant time: each function has several attribute lines).
        self._names: dict[str, None] | None = None
        self.mokutil_output: str | None = None
        self.mokutil_asked = False
        self.moktest_output: str | None = None
        self.moktest_asked = False
        devices = pci.below(root, "/sys/bus/pci/devices")
        keyed = {
            "product": pci.below(root, "/sys/class/dmi/id/product_name"),
            "modules": pci.below(root, "/proc/modules"),
            "version": pci.below(root, "/proc/driver/nvidia/version"),
            "nouveau": os.path.join(pci.below(root, "/sys/module"), "nouveau"),
            "nvidia": os.path.join(pci.below(root, "/sys/module"), "nvidia"),
            "efi": pci.below(root, "/sys/firmware/efi"),
            "efivar": os.path.join(
                pci.below(root, "/sys/firmware/efi"), "efivars", pci.SECURE_BOOT_VAR
            ),
        }
        for line in stdout.splitlines():
            key, _, rest = line.partition(" ")
            if key == "root":
                self.root_is_dir = rest == "1"
            elif key == "ls":
                self._names = {} if rest == "1" else None
            elif key in ("d", "dn"):
                name, _, attr_value = rest.partition(" ")
                attr, _, value = attr_value.partition(" ")
                if self._names is not None:
                    self._names.setdefault(name)
                # The shell read the first line; the module's code strips what it reads.
                self._files[os.path.join(devices, name, attr)] = value if key == "d" else None
            elif key in ("l", "ln"):
                name, _, target = rest.partition(" ")
                self._links[os.path.join(devices, name, "driver")] = target if key == "l" else None
            elif key == "file":
                which, _, encoded = rest.partition(" ")
                if which == "efivar":
                    self._binary[keyed[which]] = base64.b64decode(encoded)
                else:
                    self._files[keyed[which]] = b64_text(encoded)
            elif key == "nofile":
                self._files[keyed[rest]] = None
                self._binary[keyed[rest]] = None
            elif key == "dir":
                which, _, flag = rest.partition(" ")
                self._dirs[keyed[which]] = flag == "1"
            elif key == "mokutil":
                self.mokutil_asked, self.mokutil_output = True, b64_text(rest)
            elif key == "nomokutil":
                self.mokutil_asked = True
            elif key == "moktest":
                self.moktest_asked, self.moktest_output = True, b64_text(rest)
            elif key == "nomoktest":
                self.moktest_asked = True
            elif key == "state":
                encoded, kind, mode, uid, gid, *digest = rest.split(" ")
                state: dict[str, t.Any] = {
                    "type": kind,
                    "mode": "%04o" % int(mode, 8),
                    "uid": int(uid),
                    "gid": int(gid),
                }
                if kind == "file":
                    state["sha256"] = digest[0]
                self._states[b64_text(encoded)] = state
            elif key == "nostate":
                self._states[b64_text(rest)] = None
            else:
                raise ValueError(f"unexpected line {line!r}")
        self._devices = devices

    def read(self, path: str, binary: bool = False) -> t.Any:
        return answered(self._binary if binary else self._files, path)

    def listdir(self, path: str) -> list[str]:
        if path != self._devices:
            raise Unanswered(path)
        if self._names is None:
            raise OSError(f"{path} cannot be listed")
        return list(self._names)

    def readlink(self, path: str) -> str | None:
        return answered(self._links, path)

    def isdir(self, path: str) -> bool:
        return bool(answered(self._dirs, path))

    def file_state(self, path: str) -> dict[str, t.Any] | None:
        return answered(self._states, path)

    def mokutil(self) -> str | None:
        if not self.mokutil_asked:
            raise Unanswered("mokutil")
        return self.mokutil_output

    def moktest(self) -> str | None:
        if not self.moktest_asked:
            raise Unanswered("mokutil --test-key")
        return self.moktest_output


class ActionModule(kchecks.RawChecks, PipedAction):
    ARGUMENT_SPEC = _ARGUMENT_SPEC
    TAKES_CHECKS = True
    REQUIRED_BY: t.ClassVar = {"kernel_module_type": ("branch",)}

    def node_paths(self, args: dict[str, t.Any]) -> list[str]:
        return [args["host_root"] or "/", *args["file_states"]]

    def answer(
        self, args: dict[str, t.Any], task_vars: dict[str, t.Any] | None
    ) -> dict[str, t.Any]:
        root = args["host_root"] or "/"
        ask_mokutil = "1" if root == "/" else "0"
        certificate = args["mok_certificate"] or ""
        done = self.read(
            _SCRIPT, [root, ask_mokutil, pci.SECURE_BOOT_VAR, certificate, *args["file_states"]]
        )
        return self._facts(_Answers(done["stdout"], root), args)

    @staticmethod
    def _facts(answers: _Answers, args: dict[str, t.Any]) -> dict[str, t.Any]:
        root = args["host_root"] or "/"
        if not answers.root_is_dir:
            return {"failed": True, "msg": f"host_root {root} is not a directory"}
        relative = [path for path in args["file_states"] if not os.path.isabs(path)]
        if relative:
            return {
                "failed": True,
                "msg": "file_states takes absolute paths; these are not: %s" % ", ".join(relative),
            }
        facts, file_states = pci.gather(
            root,
            answers,
            args["kernel_module_type"],
            args["branch"],
            args["file_states"],
            answers.mokutil,
            answers.moktest if args["mok_certificate"] else None,
        )
        return {
            "changed": False,
            "ansible_facts": {"nvidia_pci": facts},
            "file_states": file_states,
        }
