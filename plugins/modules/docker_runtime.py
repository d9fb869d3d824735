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
  cdi:
    description:
      - Have dockerd inject devices named by the Container Device Interface (CDI) from the specs
        in C(/etc/cdi) and C(/var/run/cdi) (C(docker run --device nvidia.com/gpu=all)).
      - Docker 25.0 to 28.1 need the C(cdi) feature, so C(features.cdi = true) is set; Docker
        28.2 and newer have it on by default, and it is set only where daemon.json turned it
        off. Docker before 25.0 has no CDI; a warning says so. The version is read from
        C(dockerd --version); when there is no dockerd to ask, the feature is set (every Docker
        accepts it).
      - When false, nothing CDI is set.
    type: bool
    default: true
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
  state:
    description:
      - C(present) merges the runtime in. C(absent) undoes what kubegpu did, from its record
        (C(playbooks/reset.yml) uses it) - removes C(runtimes.<runtime_name>) when its C(path) is
        still the one kubegpu set (or puts back the entry the file had before), C(default-runtime)
        when kubegpu set it and it still names the runtime, C(features.cdi) when kubegpu set it
        (and C(features) when kubegpu added it and it is empty), C(runtimes) when kubegpu added it and
        it is empty, and the file when kubegpu created it and nothing is left. Every other key
        stays. Without a record nothing is changed.
    type: str
    choices: [present, absent]
    default: present
  record_path:
    description:
      - Where the module records what daemon.json held before it first changed it (JSON, a local
        fact that C(setup) reports as C(ansible_facts['local']['kubegpu_docker'])), read back by
        O(state=absent). An empty string keeps no record.
    type: str
    default: /etc/ansible/facts.d/kubegpu_docker.fact
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
cdi:
  description:
    - CDI as dockerd will run it; C(source) is C(daemon.json (kubegpu)) (kubegpu sets the
      feature), C(daemon.json), C(docker default) (28.2 and newer), C(unsupported) (before
      25.0) or C(not managed (cdi false)).
  returned: when O(state=present)
  type: dict
  sample: {"enabled": true, "source": "daemon.json (kubegpu)", "docker_version": "26.1.5"}
validation:
  description: C(ok), C(failed), C(skipped (...)) with the reason, or C(not run) when nothing changed.
  returned: always
  type: str
backup_file:
  description: The backup written before the change.
  returned: when a backup was written
  type: str
undone:
  description: With O(state=absent), what was taken out of daemon.json.
  returned: when O(state=absent)
  type: list
  elements: str
  sample: ["removed runtimes.nvidia"]
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.gpu.plugins.module_utils.redact import redact_diff
from ansible_collections.kubegpu.gpu.plugins.module_utils.files import (
    read_record,
    write_atomic,
    write_record,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.docker_daemon import (
    DockerDaemonError,
    cdi_plan,
    load_daemon_json,
    parse_docker_version,
    plan_daemon_json,
    plan_reset,
    record_after_merge,
)


def remove(module, result, old_text):
    p = module.params
    path = p["path"]
    record = read_record(module, p["record_path"])
    try:
        action, new_text, undone = plan_reset(old_text, record, path)
    except DockerDaemonError as exc:
        module.fail_json(msg=str(exc), **result)
    changed = action != "keep"
    # Dropping the record alone changes the host too (check mode must say so), not dockerd.
    result.update(changed=changed or record is not None, restart_required=changed, undone=undone)
    if not record:
        result["undone"] = []
        module.warn(
            "no record of kubegpu's changes at %s: %s left as it is" % (p["record_path"], path)
        )
    if changed and module._diff:
        result["diff"] = redact_diff(
            dict(before_header=path, after_header=path, before=old_text or "", after=new_text or "")
        )
    if module.check_mode:
        module.exit_json(**result)
    try:
        if changed and p["backup"]:
            result["backup_file"] = module.backup_local(path)
        if action == "remove":
            os.unlink(path)
        elif action == "edit":
            write_atomic(module, path, new_text)
        if record is not None:
            os.unlink(p["record_path"])
    except (IOError, OSError) as exc:
        module.fail_json(msg="undoing %s failed: %s" % (path, exc), **result)
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/etc/docker/daemon.json"),
            runtime_name=dict(type="str", default="nvidia"),
            runtime_binary=dict(type="str", default="/usr/bin/nvidia-container-runtime"),
            default_runtime=dict(type="bool", default=False),
            cdi=dict(type="bool", default=True),
            validate=dict(type="bool", default=True),
            dockerd_binary=dict(type="path"),
            backup=dict(type="bool", default=True),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            record_path=dict(type="str", default="/etc/ansible/facts.d/kubegpu_docker.fact"),
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
    if p["record_path"] and not os.path.isabs(p["record_path"]):
        module.fail_json(
            msg="record_path %r must be an absolute path (or empty to keep no record)"
            % p["record_path"],
            **result,
        )
    if p["state"] == "absent":
        remove(module, result, old_text)
    dockerd = p["dockerd_binary"] or module.get_bin_path("dockerd")
    if p["dockerd_binary"] and not os.path.exists(dockerd):
        module.fail_json(
            msg="dockerd_binary %s does not exist; point it at dockerd, or leave it unset"
            % dockerd,
            **result,
        )
    version = None
    if dockerd:
        rc, out, err = module.run_command([dockerd, "--version"], environ_update={"LC_ALL": "C"})
        version = parse_docker_version(out) if rc == 0 else None
    try:
        set_cdi, cdi_state, warnings = cdi_plan(load_daemon_json(old_text, path), version, p["cdi"])
        new_text, changed = plan_daemon_json(
            old_text, p["runtime_name"], p["runtime_binary"], p["default_runtime"], path, set_cdi
        )
    except DockerDaemonError as exc:
        module.fail_json(msg=str(exc), **result)
    cdi_state["docker_version"] = ".".join(str(v) for v in version) if version else None
    result["cdi"] = cdi_state
    for warning in warnings:
        module.warn(warning)
    result.update(changed=changed, restart_required=changed)
    if changed and module._diff:
        result["diff"] = redact_diff(
            dict(before_header=path, after_header=path, before=old_text or "", after=new_text)
        )
    if not changed:
        module.exit_json(**result)

    if p["validate"]:
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
        if p["record_path"]:
            record = record_after_merge(
                read_record(module, p["record_path"]),
                old_text,
                p["runtime_name"],
                p["runtime_binary"],
                p["default_runtime"],
                path,
                set_cdi,
            )
            write_record(module, p["record_path"], record)
        write_atomic(module, path, new_text)
    except (IOError, OSError) as exc:
        module.fail_json(msg="writing %s failed: %s" % (path, exc), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
