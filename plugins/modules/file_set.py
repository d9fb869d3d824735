#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: file_set
short_description: Put several small files and directories in place (or remove them) in one task
version_added: "0.1.0"
description:
  - Each entry of O(files) is what one M(ansible.builtin.copy) task with C(content), one
    M(ansible.builtin.file) task with C(state=directory) or one with C(state=absent) would do,
    in the order given. Owner, group, mode and SELinux context are set the way those modules
    set them.
  - A file is written only when its content differs, to a temporary file beside it that is then
    renamed over it, so no reader ever sees half a file.
  - One module run on the host instead of two per copy task (a stat, then the file module) and
    one per file task; the roles use it for the files they own outright (a blacklist, a pin,
    their local facts).
options:
  files:
    description: The files and directories, in order.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: Absolute path on the host.
        type: path
        required: true
      state:
        description: C(file) writes O(files[].content); C(directory) makes the directory
          (and its parents); C(absent) removes the file, or the directory with its content.
        type: str
        choices: [file, directory, absent]
        default: file
      content:
        description: The whole content of the file (text, UTF-8); required for C(state=file).
        type: str
      owner:
        description: Owner, as in M(ansible.builtin.file).
        type: str
      group:
        description: Group, as in M(ansible.builtin.file).
        type: str
      mode:
        description: Mode, as in M(ansible.builtin.file); quote it ("0644").
        type: raw
      backup:
        description: Keep a timestamped copy of a file before it is overwritten or removed.
        type: bool
        default: false
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
author:
  - kubegpu contributors
"""

EXAMPLES = r"""
- name: Blacklist nouveau and record the driver
  kubegpu.gpu.file_set:
    files:
      - path: /etc/modprobe.d/blacklist-nouveau-kubegpu.conf
        content: |
          blacklist nouveau
        owner: root
        group: root
        mode: "0644"
      - path: /etc/ansible/facts.d
        state: directory
        mode: "0755"
      - path: /etc/modprobe.d/nvidia-kubegpu.conf
        state: absent
"""

RETURN = r"""
changed_paths:
  description: The paths that were (in check mode, would be) written, made, changed or removed.
  returned: always
  type: list
  elements: str
backup_files:
  description: The backups made, by path.
  returned: when a backup was made
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.gpu.plugins.module_utils.redact import redact_diff
from ansible_collections.kubegpu.gpu.plugins.module_utils.files import apply_file_entry

FILE_SPEC = dict(
    path=dict(type="path", required=True),
    state=dict(type="str", choices=["file", "directory", "absent"], default="file"),
    content=dict(type="str"),
    owner=dict(type="str"),
    group=dict(type="str"),
    mode=dict(type="raw"),
    backup=dict(type="bool", default=False),
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            files=dict(type="list", elements="dict", required=True, options=FILE_SPEC)
        ),
        supports_check_mode=True,
    )
    result = dict(changed=False, changed_paths=[], backup_files={})
    diffs = []
    for entry in module.params["files"]:
        changed, before, after = apply_file_entry(module, entry, result["backup_files"])
        if changed:
            result["changed"] = True
            result["changed_paths"].append(entry["path"])
            if before is not None or after is not None:
                diffs.append(
                    dict(
                        before_header=entry["path"],
                        after_header=entry["path"],
                        before=before or "",
                        after=after or "",
                    )
                )
    if not result["backup_files"]:
        del result["backup_files"]
    if module._diff:
        result["diff"] = redact_diff(diffs)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
