#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: containerd_runtime
short_description: Give containerd the nvidia runtime through a validated drop-in file
version_added: "0.1.0"
description:
  - Writes the nvidia runtime into a drop-in file (O(drop_in_dir)/O(drop_in_name)) and makes the
    main containerd config import O(drop_in_dir)C(/*.toml). The drop-in survives tools that
    rewrite the main config; when one drops the C(imports) line, the next run adds it back and
    changes nothing else.
  - Reads the installed containerd's version (C(containerd --version)) and the main config's
    C(version), and writes the drop-in in the same version. Version 2 (containerd 1.6 and 1.7, and
    2.x with an old config) puts the runtime under the CRI plugin C(io.containerd.grpc.v1.cri);
    version 3 (containerd 2.x) under C(io.containerd.cri.v1.runtime). A main config without
    C(version) is version 1 for containerd 1.x (plugin C(cri)) and is refused for 2.x. Versions
    above 3 (containerd 2.3 brings 4) are refused with a message, since a drop-in must have the main
    config's version, as containerd refuses a higher one or (2.1) leaves the main config's
    settings unmigrated.
  - On containerd 1.x an imported file replaces a whole plugin section (containerd issue 5837), so
    a drop-in with only the nvidia runtime would drop the runc runtime and every other CRI setting.
    There the drop-in holds the effective CRI section of the main config and its other imports, as
    C(containerd config dump) reports it without this drop-in, plus the nvidia runtime; it is
    derived again on every run, so a changed main config is followed. On containerd 2.x, which
    merges imported files key by key, the drop-in holds only the nvidia runtime.
  - With O(cdi) (the default) containerd is also made to read CDI specs, see O(cdi).
  - The runtime is C(runtime_type = "io.containerd.runc.v2") with C(BinaryName) =
    O(runtime_binary) and C(SystemdCgroup) copied from the runtime it must agree with (the default
    runtime unless it is O(runtime_name), else C(runc)) in the effective config.
  - Before any file is written, the candidate is validated with the real containerd
    (O(validate)); its files are laid out in a scratch directory, C(containerd config dump) must
    load them and show the runtime as rendered, and a scratch containerd started on them with its
    own socket, root and state directories (and its NRI socket, debug, metrics and TCP listeners
    moved there too) must report the CRI plugin C(ok) in C(ctr plugins ls). A candidate that fails
    is never put in place; the task fails with containerd's own message.
  - The main config is edited as text (only the C(imports) line changes, every other byte is
    kept), with a backup first (O(backup)). When there is no main config, a minimal one with the
    version and the imports line is created. Files are written atomically.
  - Restarts nothing. RV(restart_required) is true exactly when a file changed; the
    C(container_runtime) role restarts containerd then.
options:
  config_path:
    description: The main containerd config.
    type: path
    default: /etc/containerd/config.toml
  drop_in_dir:
    description:
      - Directory of the drop-in; the main config imports C(<drop_in_dir>/*.toml).
      - Must be a directory (or absent); a file there stops the task before any change.
    type: path
    default: /etc/containerd/conf.d
  drop_in_name:
    description:
      - File name of the drop-in. Must end in C(.toml). On containerd 1.x it has to sort after
        any other drop-in that sets the CRI section, because the last one replaces the section;
        validation reports files that do.
    type: str
    default: 99-nvidia.toml
  runtime_name:
    description: Name of the runtime, the C(handler) of the RuntimeClass that uses it.
    type: str
    default: nvidia
  runtime_binary:
    description: Absolute path of nvidia-container-runtime, written as the runtime's C(BinaryName).
    type: path
    default: /usr/bin/nvidia-container-runtime
  default_runtime:
    description:
      - Make O(runtime_name) containerd's default runtime (C(default_runtime_name)), so every pod
        gets it. When false (the default), pods ask for it through a RuntimeClass, and whatever
        default the main config has is kept.
    type: bool
    default: false
  cdi:
    description:
      - Have containerd's CRI plugin inject devices named by the Container Device Interface
        (CDI), from the specs in C(/etc/cdi) and C(/var/run/cdi) that the container toolkit
        generates; the device plugin's C(cdi-cri) strategy and DRA drivers need it.
      - containerd 1.7 has CDI off by default; the drop-in sets C(enable_cdi = true) and
        C(cdi_spec_dirs) (the ones the config has, plus those two). containerd 2.x has it on by
        default; the drop-in sets a key only where the main config or another import turned
        C(enable_cdi) off or left a directory out. containerd 1.6 has no CDI; a warning says
        so, and the runtime is wired in without it.
      - When false, nothing CDI is set, and containerd keeps whatever its config says (the
        legacy injection through the nvidia runtime's environment variables).
      - A reset (O(state=absent)) removes the drop-in, and with it these settings.
    type: bool
    default: true
  nvidia_runtime:
    description:
      - Add the nvidia runtime (O(runtime_name)). False on a host without a GPU that still gets
        the rest of the drop-in (O(systemd_cgroup), O(registry_mirrors)), for example a
        control-plane host of a cluster kubegpu bootstraps; O(default_runtime) then has no
        effect and no runtime binary is needed.
    type: bool
    default: true
  systemd_cgroup:
    description:
      - The C(SystemdCgroup) the pods' runtimes must have for the kubelet's cgroup driver, true
        for C(systemd) and false for C(cgroupfs). Where the main config and the other imports
        give the default runtime (and C(runc)) another value, the drop-in carries those
        runtimes, as C(containerd config dump) shows them, with this value; the nvidia runtime
        gets it too.
      - Not given (the default), the value the other files give is kept, and the nvidia
        runtime follows it.
    type: bool
  registry_mirrors:
    description:
      - Registry mirrors for the CRI plugin, as a mapping of registry host (as image names
        have it, for example C(registry.k8s.io), C(docker.io), C(10.0.0.1:5000), or
        C(_default) for every registry without its own entry) to its settings -
        C(endpoints) (required, a list of C(http://) or C(https://) mirror URLs, tried in order;
        C(http://) is plain HTTP), C(skip_verify) (bool), C(ca) (absolute path of a CA bundle on
        the node), C(fallback) (bool, default true - the registry itself is tried after the
        mirrors).
      - Each host gets O(registry_config_path)C(/<host>/hosts.toml), with kubegpu's mark, and the
        drop-in points the CRI plugin's C(registry.config_path) at O(registry_config_path)
        (containerd 1.7 in the CRI section; 2.x in C(io.containerd.cri.v1.images)). containerd
        reads the hosts files on every pull, so a change of mirrors alone restarts nothing.
      - Files kubegpu wrote for hosts no longer listed are removed; a hosts.toml that is not
        kubegpu's is never overwritten (the task fails and says so). O(state=absent) removes
        every hosts.toml with kubegpu's mark there.
      - Empty (the default) sets no C(config_path).
    type: dict
    default: {}
  registry_config_path:
    description: The certs.d folder of the hosts.toml files (see O(registry_mirrors)).
    type: path
    default: /etc/containerd/certs.d
  validate:
    description:
      - Validate the candidate with the real containerd before writing (see the description).
      - Set to false only on hosts where containerd cannot be started, for example to render a
        config for a host that is not running. C(containerd --version) and C(config dump) are
        still needed to work out the drop-in.
      - In check mode only the C(config dump) part runs.
    type: bool
    default: true
  validate_timeout:
    description: Seconds the scratch containerd may take to serve its socket.
    type: int
    default: 30
  containerd_binary:
    description: The containerd to ask; the first C(containerd) on E(PATH) when not given.
    type: path
  ctr_binary:
    description: The ctr used to ask the scratch containerd for its plugins; the first C(ctr) on E(PATH) when not given.
    type: path
  backup:
    description: Keep a copy of a file before changing it, beside it (a name ending in C(~), which the C(*.toml) import does not match).
    type: bool
    default: true
  state:
    description:
      - C(present) wires the runtime in. C(absent) undoes what kubegpu did, exactly
        (C(playbooks/reset.yml) uses it) - removes the drop-in when it carries kubegpu's mark,
        takes the imports entry out of the main config only when kubegpu added it (the record
        says so, or, without a record, the oldest backup kubegpu made lacks it), removes the
        C(imports) line too when kubegpu created that line, and the main config when kubegpu
        created it and nothing else is in it. Every other change to the main config is kept.
      - C(absent) needs neither containerd nor validation.
    type: str
    choices: [present, absent]
    default: present
  record_path:
    description:
      - Where the module records what it changed in the main config (JSON, a local fact that
        C(setup) reports as C(ansible_facts['local']['kubegpu_containerd'])), read back by
        O(state=absent). Written each time the module adds the imports entry.
      - An empty string keeps no record.
    type: str
    default: /etc/ansible/facts.d/kubegpu_containerd.fact
  restart_marker:
    description:
      - A file the module writes before it changes either file, for the caller to remove once
        containerd has restarted. While it exists, a run with nothing to change still returns
        C(changed) and C(restart_required) (with C(restart_pending)), so a restart that an
        interrupted run never made is made by the next one.
      - An empty string keeps no marker.
    type: str
    default: ""
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Computes both files and validates them with C(containerd config dump); does not start the scratch containerd or write anything.
  diff_mode:
    support: full
  platform:
    platforms: posix
notes:
  - TOML is read with the standard C(tomllib) on Python 3.11 and newer, else with the C(toml) package
    (Debian and Ubuntu python3-toml) when installed, else with a small reader in this collection that
    covers what containerd configs use. The main config itself is only scanned up to its first
    table, and only its C(imports) line is rewritten; containerd does the rest of the reading
    (C(config dump)), so the result does not depend on which reader ran.
  - The scratch containerd reads the same host paths the config names (for example the CNI
    config directory, which containerd creates when missing, and the C(opt) plugin's directory);
    a devmapper snapshotter with a pool is disabled in it, so it never opens the live thin pool.
  - Files that nvidia-ctk 1.18.0 wrote to C(config.d) next to the main config while the imports
    read C(conf.d) are reported as warnings, and left alone.
  - Newer containerd releases may import C(/etc/containerd/conf.d/*.toml) on their own (2.1.9,
    tested, does not); the explicit C(imports) entry is then redundant, not harmful, since
    containerd loads each file once.
  - When the connection pipelines (pipelining on, and a connection and become method that
    support it), the module's action plugin first reads the node with two C(sh) scripts (the
    files, C(containerd --version), and C(config dump) of a scratch config in a temporary
    folder that it removes) and runs this module's plan (module_utils/containerd.py) on the
    controller, so the node starts no Python. When that plan finds nothing to change, its
    result is the answer (RV(toml_parser) is then the controller's reader); anything else (a
    change, O(state=absent), a refusal, an import from another folder, a path with C(~) or C($))
    runs the module.
seealso:
  - module: kubegpu.gpu.docker_runtime
author:
  - kubegpu maintainers
"""

EXAMPLES = r"""
- name: Give containerd the nvidia runtime (pods ask for it through a RuntimeClass)
  kubegpu.gpu.containerd_runtime:
  register: __container_runtime_containerd
  notify: Restart containerd

- name: Make nvidia the default runtime, with the toolkit installed under /usr/local
  kubegpu.gpu.containerd_runtime:
    runtime_binary: /usr/local/nvidia/toolkit/nvidia-container-runtime
    default_runtime: true
"""

RETURN = r"""
restart_required:
  description: Whether a file changed, so containerd must be restarted to use it.
  returned: always
  type: bool
containerd_version:
  description: The installed containerd's version.
  returned: when containerd was found
  type: str
  sample: 1.6.20
config_version:
  description: The main config's version (C(null) when it has none, which containerd 1.x reads as version 1).
  returned: when containerd was found
  type: int
  sample: 2
schema:
  description: Where the runtime went, and how containerd merges imported files.
  returned: when containerd was found
  type: dict
  sample: {"config_version": 2, "plugin": "io.containerd.grpc.v1.cri", "merge": "replace", "effective_plugin": "io.containerd.grpc.v1.cri"}
drop_in_path:
  description: The drop-in file.
  returned: always
  type: str
  sample: /etc/containerd/conf.d/99-nvidia.toml
config_changed:
  description: Whether the main config was (or in check mode would be) changed or created.
  returned: always
  type: bool
drop_in_changed:
  description: Whether the drop-in was (or would be) changed or created.
  returned: always
  type: bool
systemd_cgroup:
  description: The SystemdCgroup value given to the runtime.
  returned: when containerd was found
  type: bool
systemd_cgroup_source:
  description: Where that value was read in the effective config, or that the drop-in sets it.
  returned: when containerd was found
  type: str
  sample: runtimes.runc.options.SystemdCgroup
cgroup_runtimes:
  description: The runtimes the drop-in carries to set O(systemd_cgroup) (none when the other files agree).
  returned: when containerd was found
  type: list
  elements: str
  sample: [runc]
cdi:
  description:
    - CDI as containerd will run it once the drop-in is loaded; C(source) says where that comes
      from, C(drop-in) (kubegpu sets it), C(containerd default) (2.x, nothing to set),
      C(unsupported) (containerd 1.6) or C(not managed (cdi false)) (then C(enabled) is what
      the config says).
  returned: when containerd was found
  type: dict
  sample: {"enabled": true, "spec_dirs": ["/etc/cdi", "/var/run/cdi"], "source": "drop-in"}
registry_hosts:
  description: The registry mirrors' hosts.toml files written (or that would be) and removed.
  returned: when O(state=present) and containerd was found
  type: dict
  sample: {"written": ["/etc/containerd/certs.d/registry.k8s.io/hosts.toml"], "removed": []}
validation:
  description: What was checked; C(dump) and C(daemon) are C(ok), C(skipped) or C(not run), C(plugins) the CRI plugins' states in the scratch containerd.
  returned: always
  type: dict
  sample: {"dump": "ok", "daemon": "ok", "plugins": {"io.containerd.grpc.v1.cri": "ok"}}
backup_files:
  description: Backups written before changing files.
  returned: always
  type: list
  elements: str
toml_parser:
  description: Which TOML reader ran (C(tomllib), C(toml) or C(builtin)); on the controller when the action plugin answered (see the notes).
  returned: always
  type: str
restart_pending:
  description: True when nothing changed but O(restart_marker) says a restart is still owed.
  returned: when a restart is pending
  type: bool
removal:
  description: With O(state=absent), what was done with the main config and why.
  returned: when O(state=absent)
  type: dict
  sample: {"main_config": "edit", "why": "kubegpu added the imports entry (recorded)", "drop_in": "removed"}
"""

import glob
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.gpu.plugins.module_utils.redact import redact_diff
from ansible_collections.kubegpu.gpu.plugins.module_utils.files import (
    RESTART_PENDING_NOTE,
    mark_restart_pending,
    read_record,
    write_atomic,
    write_record,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.containerd import (
    MANAGED_MARK,
    ContainerdConfigError,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.containerd_params import (
    ARGUMENT_SPEC,
    BINARY_DIRS,
    COMMAND_ENVIRONMENT,
    initial_result,
    not_installed_message,
    param_problem,
    plan_for,
    update_result,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.containerd_hosts import (
    HOSTS_MARK,
    ContainerdHostsError,
    plan_hosts,
    read_existing,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.containerd_reset import (
    plan_removal,
    record_after_apply,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.containerd_validate import (
    validate_candidate,
)


def read_optional(path):
    if not os.path.isfile(path):
        return None
    with open(path, "r", encoding="utf-8", newline="") as f:
        return f.read()


def remove_hosts(paths):
    """Remove kubegpu's hosts.toml files, and each registry folder they leave empty."""
    for path in paths:
        os.unlink(path)
        folder = os.path.dirname(path)
        if not os.listdir(folder):
            os.rmdir(folder)


def remove(module, result):
    """state=absent: undo exactly what kubegpu did (see the documentation)."""
    p = module.params
    drop_in_path = result["drop_in_path"]
    record = read_record(module, p["record_path"])
    removal = {"drop_in": "absent", "main_config": "keep", "record": p["record_path"] or None}
    drop_in = read_optional(drop_in_path)
    if drop_in is not None:
        removal["drop_in"] = "removed" if MANAGED_MARK in drop_in else "kept (not kubegpu's)"
    main_text = read_optional(p["config_path"])
    backups = sorted(glob.glob(glob.escape(p["config_path"]) + ".*~"), key=os.path.getmtime)
    oldest = read_optional(backups[0]) if backups else None
    entry = os.path.join(p["drop_in_dir"], "*.toml")
    try:
        action, new_text, why = plan_removal(main_text, record, entry, oldest, p["config_path"])
    except ContainerdConfigError as exc:
        module.fail_json(msg="Nothing was changed: %s" % exc, **result)
    removal.update(main_config=action, why=why)
    existing = read_existing(p["registry_config_path"])
    hosts = sorted(
        os.path.join(p["registry_config_path"], name, "hosts.toml")
        for name, text in existing.items()
        if HOSTS_MARK in text
    )
    removal["registry_hosts"] = hosts
    changed = removal["drop_in"] == "removed" or action != "keep"
    drops_record = record is not None and bool(p["record_path"])
    # Dropping the record alone changes the host too (check mode must say so), not containerd.
    result.update(
        changed=changed or drops_record or bool(hosts), restart_required=changed, removal=removal
    )
    result["config_changed"] = action != "keep"
    result["drop_in_changed"] = removal["drop_in"] == "removed"
    if module._diff and changed:
        diffs = []
        if action != "keep":
            diffs.append(
                dict(
                    before_header=p["config_path"],
                    after_header=p["config_path"],
                    before=main_text,
                    after=new_text or "",
                )
            )
        if removal["drop_in"] == "removed":
            diffs.append(
                dict(
                    before_header=drop_in_path, after_header=drop_in_path, before=drop_in, after=""
                )
            )
        result["diff"] = redact_diff(diffs)
    if module.check_mode:
        module.exit_json(**result)
    try:
        if removal["drop_in"] == "removed":
            os.unlink(drop_in_path)
        if action != "keep" and p["backup"]:
            result["backup_files"].append(module.backup_local(p["config_path"]))
        if action == "remove":
            os.unlink(p["config_path"])
        elif action == "edit":
            write_atomic(module, p["config_path"], new_text, 0o644)
        if drops_record:
            os.unlink(p["record_path"])
        remove_hosts(hosts)
    except (IOError, OSError) as exc:
        module.fail_json(msg="undoing the containerd configuration failed: %s" % exc, **result)
    module.exit_json(**result)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    result = initial_result(p)
    problem = param_problem(p)
    if problem:
        module.fail_json(msg=problem, **result)
    if p["state"] == "absent":
        remove(module, result)

    containerd = p["containerd_binary"] or module.get_bin_path("containerd", opt_dirs=BINARY_DIRS)
    if not containerd or not os.path.exists(containerd):
        module.fail_json(msg=not_installed_message(containerd), **result)
    ctr = p["ctr_binary"] or module.get_bin_path("ctr", opt_dirs=BINARY_DIRS)

    def run(argv):
        return module.run_command(argv, environ_update=COMMAND_ENVIRONMENT)

    try:
        planned = plan_for(p, run, containerd)
    except ContainerdConfigError as exc:
        module.fail_json(msg=str(exc), **result)

    changed = update_result(result, planned)
    for warning in planned["warnings"]:
        module.warn(warning)
    try:
        hosts = plan_hosts(
            p["registry_config_path"],
            p["registry_mirrors"],
            read_existing(p["registry_config_path"]),
        )
    except (ContainerdHostsError, IOError, OSError) as exc:
        module.fail_json(msg=str(exc), **result)
    result["registry_hosts"] = {"written": sorted(hosts["write"]), "removed": hosts["remove"]}
    hosts_changed = bool(hosts["write"] or hosts["remove"])
    drop_in_path = result["drop_in_path"]
    config_changed, drop_in_changed = result["config_changed"], result["drop_in_changed"]
    diffs = []
    if module._diff and changed:
        if config_changed:
            diffs.append(
                dict(
                    before_header=p["config_path"],
                    after_header=p["config_path"],
                    before=planned["main_before"] or "",
                    after=planned["main_after"],
                )
            )
        if drop_in_changed:
            diffs.append(
                dict(
                    before_header=drop_in_path,
                    after_header=drop_in_path,
                    before=planned["drop_in_before"] or "",
                    after=planned["drop_in_after"],
                )
            )
    if module._diff and hosts_changed:
        for path in sorted(hosts["write"]) + hosts["remove"]:
            diffs.append(
                dict(
                    before_header=path,
                    after_header=path,
                    before=read_optional(path) or "",
                    after=hosts["write"].get(path, ""),
                )
            )
    if module._diff and (changed or hosts_changed):
        result["diff"] = redact_diff(diffs)
    if not changed:
        if hosts_changed:
            result["changed"] = True
            if not module.check_mode:
                write_hosts(module, result, hosts)
        if p["restart_marker"] and os.path.exists(p["restart_marker"]):
            result.update(changed=True, restart_required=True, restart_pending=True)
            module.warn(RESTART_PENDING_NOTE % p["restart_marker"])
        module.exit_json(**result)
    record = read_record(module, p["record_path"])

    if p["validate"]:
        start_daemon = not module.check_mode
        if start_daemon and not ctr:
            module.fail_json(
                msg="ctr (from the containerd package) is needed to validate the new configuration "
                "and was not found; set ctr_binary, or validate: false to skip validation",
                **result,
            )
        try:
            result["validation"] = validate_candidate(
                run,
                containerd,
                ctr,
                planned["containerd_version_tuple"],
                planned["schema"],
                p["config_path"],
                planned["main_after"],
                drop_in_path,
                planned["drop_in_after"],
                p["runtime_name"],
                p["runtime_binary"],
                planned["systemd_cgroup"],
                p["default_runtime"],
                start_daemon=start_daemon,
                timeout=p["validate_timeout"],
                cdi=planned["cdi_settings"],
                registry_config_path=p["registry_config_path"] if p["registry_mirrors"] else None,
                nvidia=p["nvidia_runtime"],
                cgroup_runtimes=planned["cgroup_runtimes"],
            )
        except ContainerdConfigError as exc:
            result.update(changed=False, restart_required=False)
            module.fail_json(msg="Nothing was changed: %s" % exc, **result)
        if module.check_mode:
            result["validation"]["daemon"] = "skipped (check mode)"
    else:
        result["validation"] = {"dump": "skipped", "daemon": "skipped"}

    if module.check_mode:
        module.exit_json(**result)

    try:
        changing = [drop_in_path] * drop_in_changed + [p["config_path"]] * config_changed
        mark_restart_pending(module, p["restart_marker"], changing)
        if drop_in_changed:
            if not os.path.isdir(p["drop_in_dir"]):
                os.makedirs(p["drop_in_dir"], 0o755)
            if p["backup"] and planned["drop_in_before"] is not None:
                result["backup_files"].append(module.backup_local(drop_in_path))
            write_atomic(module, drop_in_path, planned["drop_in_after"], 0o644)
        if config_changed:
            parent = os.path.dirname(p["config_path"])
            if not os.path.isdir(parent):
                os.makedirs(parent, 0o755)
            if p["backup"] and planned["main_before"] is not None:
                result["backup_files"].append(module.backup_local(p["config_path"]))
            write_atomic(module, p["config_path"], planned["main_after"], 0o644)
        if p["record_path"] and config_changed:
            write_record(
                module, p["record_path"], record_after_apply(record, planned, config_changed)
            )
    except (IOError, OSError) as exc:
        module.fail_json(msg="writing the containerd configuration failed: %s" % exc, **result)
    if hosts_changed:
        result["changed"] = True
        write_hosts(module, result, hosts)
    module.exit_json(**result)


def write_hosts(module, result, hosts):
    """Write and remove the registry mirrors' hosts.toml files (containerd reads them on each
    pull: no restart)."""
    try:
        for path, text in sorted(hosts["write"].items()):
            folder = os.path.dirname(path)
            if not os.path.isdir(folder):
                os.makedirs(folder, 0o755)
            write_atomic(module, path, text, 0o644)
        remove_hosts(hosts["remove"])
    except (IOError, OSError) as exc:
        module.fail_json(msg="writing the registry mirrors' hosts.toml failed: %s" % exc, **result)


if __name__ == "__main__":
    main()
