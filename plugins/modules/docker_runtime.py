#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: docker_runtime
short_description: Merge the nvidia runtime into Docker's daemon.json
version_added: "0.1.0"
description:
  - Sets C(runtimes.<runtime_name>.path) in Docker's daemon.json, and C(default-runtime) when
    O(default_runtime) is true. Every other key of the file is kept, in its order, and so are other
    keys of an existing runtime entry (for example the C(args) that nvidia-ctk writes).
  - The file is merged as JSON data and written only when the data changes, in the indentation the
    file already uses (4 spaces for a new file, as nvidia-ctk writes it). Writes are atomic, with a
    backup first (O(backup)).
  - When dockerd can check a config file (C(dockerd --validate), Docker 23 and newer), the merged
    file is checked before it is put in place (O(validate)); older dockerd (Debian 12 has 20.10)
    cannot, and RV(validation) says so.
  - Restarts nothing. RV(restart_required) is true exactly when the file changed.
  - This module is the Docker counterpart of M(kubegpu.gpu.containerd_runtime); a separate module
    because Docker's configuration is JSON data without versions or imports.
options:
  path:
    description: Docker's daemon configuration file.
    type: path
    default: /etc/docker/daemon.json
  runtime_name:
    description: Name of the runtime (C(docker run --runtime=<name>)).
    type: str
    default: nvidia
  runtime_binary:
    description: The runtime's C(path); Docker also accepts a name it finds on E(PATH).
    type: str
    default: /usr/bin/nvidia-container-runtime
  default_runtime:
    description: Set C(default-runtime) to O(runtime_name). When false, an existing C(default-runtime) is left as it is.
    type: bool
    default: false
  validate:
    description: Check the merged file with C(dockerd --validate --config-file) when dockerd supports it.
    type: bool
    default: true
  dockerd_binary:
    description: The dockerd used for validation; the first C(dockerd) on E(PATH) when not given.
    type: path
  backup:
    description: Keep a copy of the file before changing it, beside it.
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
seealso:
  - module: kubegpu.gpu.containerd_runtime
author:
  - kubegpu maintainers
"""

EXAMPLES = r"""
- name: Give Docker the nvidia runtime
  kubegpu.gpu.docker_runtime:
  notify: Restart docker

- name: Make it Docker's default runtime
  kubegpu.gpu.docker_runtime:
    default_runtime: true
"""

RETURN = r"""
restart_required:
  description: Whether the file changed, so dockerd must be restarted to use it.
  returned: always
  type: bool
path:
  description: The daemon.json that was merged.
  returned: always
  type: str
validation:
  description: C(ok), C(failed), C(skipped (...)) with the reason, or C(not run) when nothing changed.
  returned: always
  type: str
backup_file:
  description: The backup written before the change.
  returned: when a backup was written
  type: str
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.gpu.plugins.module_utils.docker_daemon import (
    DockerDaemonError,
    plan_daemon_json,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/etc/docker/daemon.json"),
            runtime_name=dict(type="str", default="nvidia"),
            runtime_binary=dict(type="str", default="/usr/bin/nvidia-container-runtime"),
            default_runtime=dict(type="bool", default=False),
            validate=dict(type="bool", default=True),
            dockerd_binary=dict(type="path"),
            backup=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    path = p["path"]
    result = dict(changed=False, restart_required=False, path=path, validation="not run")
    if not p["runtime_name"].strip() or not p["runtime_binary"].strip():
        module.fail_json(msg="runtime_name and runtime_binary must not be empty", **result)
    if os.path.exists(path) and not os.path.isfile(path):
        module.fail_json(
            msg="%s exists but is not a regular file; nothing was changed" % path, **result
        )
    old_text = None
    if os.path.isfile(path):
        with open(path, "r", encoding="utf-8", newline="") as f:
            old_text = f.read()
    try:
        new_text, changed = plan_daemon_json(
            old_text, p["runtime_name"], p["runtime_binary"], p["default_runtime"], path
        )
    except DockerDaemonError as exc:
        module.fail_json(msg=str(exc), **result)
    result.update(changed=changed, restart_required=changed)
    if changed and module._diff:
        result["diff"] = dict(
            before_header=path, after_header=path, before=old_text or "", after=new_text
        )
    if not changed:
        module.exit_json(**result)

    if p["validate"]:
        dockerd = p["dockerd_binary"] or module.get_bin_path("dockerd")
        if p["dockerd_binary"] and not os.path.exists(dockerd):
            module.fail_json(
                msg="dockerd_binary %s does not exist; point it at dockerd, or leave it unset"
                % dockerd,
                **result,
            )
        if not dockerd:
            result["validation"] = "skipped (dockerd not found)"
        else:
            rc, out, err = module.run_command([dockerd, "--help"], environ_update={"LC_ALL": "C"})
            if "--validate" not in out + err:
                result["validation"] = "skipped (this dockerd has no --validate; Docker 23+ has)"
            else:
                fd, tmp = tempfile.mkstemp(prefix="kubegpu-daemon-", suffix=".json")
                try:
                    with os.fdopen(fd, "w", encoding="utf-8") as f:
                        f.write(new_text)
                    rc, out, err = module.run_command(
                        [dockerd, "--validate", "--config-file", tmp],
                        environ_update={"LC_ALL": "C"},
                    )
                finally:
                    os.unlink(tmp)
                if rc != 0:
                    reason = (err or out).strip().replace(tmp, path + " (merged)")
                    result.update(changed=False, restart_required=False, validation="failed")
                    module.fail_json(
                        msg="dockerd rejects the merged %s: %s; nothing was changed"
                        % (path, reason),
                        **result,
                    )
                result["validation"] = "ok"
    else:
        result["validation"] = "skipped (validate: false)"

    if module.check_mode:
        module.exit_json(**result)
    directory = os.path.dirname(path)
    try:
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o755)
        if p["backup"] and old_text is not None:
            result["backup_file"] = module.backup_local(path)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".")
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(new_text)
        module.atomic_move(tmp, path)
        if old_text is None:
            os.chmod(path, 0o644)
    except (IOError, OSError) as exc:
        module.fail_json(msg="writing %s failed: %s" % (path, exc), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
