# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""kubegpu.gpu.nvidia_driver_apt: read a Debian or Ubuntu node once and decide, on the controller,
what the nvidia_driver role does with its APT helpers, sources and driver packages
(plugins/module_utils/nvidia_driver_apt.py holds the read and the rules)."""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.kubegpu.gpu.plugins.module_utils import nvidia_driver_apt as apt
from ansible_collections.kubegpu.gpu.plugins.module_utils.deb822 import deb822_source
from ansible_collections.kubegpu.gpu.plugins.plugin_utils.piped import read_command

_STRINGS = {"type": "list", "elements": "str", "default": []}
# What the host looks like besides its packages, for settle() (module_utils/nvidia_driver_apt.py).
_HOST_SPEC: dict[str, t.Any] = {
    "gpu_count": {"type": "int", "required": True},
    "services": _STRINGS,
    "module_loaded": {"type": "bool", "required": True},
    "nouveau_loaded": {"type": "bool", "required": True},
    "loaded_driver": {"type": "dict"},
    "needs_headers": {"type": "bool", "required": True},
    "files_in_place": {"type": "bool", "required": True},
    "fact_sha256": {"type": "str"},
}
_ARGUMENT_SPEC: dict[str, t.Any] = {
    "source": {"type": "str", "required": True, "choices": ["distribution", "cuda_repo", "mirror"]},
    "release": {"type": "str", "default": ""},
    "helpers": _STRINGS,
    "distribution": {"type": "str", "required": True},
    "kernel": {"type": "str", "required": True},
    "module_type": {"type": "str", "required": True, "choices": ["open", "proprietary"]},
    "build": {"type": "str", "required": True, "choices": ["dkms", "precompiled"]},
    "persistenced": {"type": "bool", "required": True},
    "fabricmanager": {"type": "bool", "required": True},
    "packages": _STRINGS,
    "fabricmanager_package": {"type": "str", "default": ""},
    "version": {"type": "str", "default": ""},
    "branch": {"type": "str", "required": True},
    "allow_version_change": {"type": "bool", "default": False},
    "own": {"type": "str", "default": ""},
    "suites": _STRINGS,
    "components": _STRINGS,
    "keyring": {"type": "str", "default": ""},
    "reread": {"type": "bool", "default": False},
    "host": {"type": "dict", "required": True, "options": _HOST_SPEC},
}


_SETTLE_ARGS = ("branch", "source", "build", "module_type", "persistenced", "fabricmanager")


class ActionModule(ActionBase):
    """One read of the node (apt.READ_SCRIPT; every installed package too when the driver
    version changes) and the answer of apt.plan(): never changed, in check mode too.

    Fails where the role must stop: the read failed; source 'distribution' and the host's APT
    sources have no RELEASE main; the version read (apt-cache policy) failed although the
    sources step has nothing to do first, or on the read after it (reread)."""

    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        _, args = self.validate_argument_spec(argument_spec=_ARGUMENT_SPEC)
        host = dict(args["host"])
        distribution = args["source"] == "distribution"
        own = "/etc/apt/sources.list.d/" + args["own"] if distribution and args["own"] else ""
        names = apt.package_names(
            args["distribution"],
            "Debian",
            args["source"],
            args["module_type"],
            args["branch"],
            args["build"],
            args["kernel"],
            args["persistenced"],
            args["packages"],
            args["fabricmanager_package"],
        )
        packages = names["versioned"] + ([names["fabricmanager"]] if args["fabricmanager"] else [])
        argv = apt.read_argv(
            args["own"] if distribution else "",
            args["helpers"],
            names["version_package"],
            packages + names["extra"],
        )
        done = read_command(self, apt.READ_SCRIPT, argv, task_vars)
        if done.get("rc"):
            raise AnsibleActionFail(
                "The APT read of the node failed (rc %s): %s" % (done["rc"], done["stderr"])
            )
        settings = dict(
            args,
            own=own,
            version_package=names["version_package"],
            packages=packages,
            extra_packages=names["extra"],
            source_text=lambda entry: deb822_source(
                {
                    "name": entry["name"],
                    "types": ["deb"],
                    "uris": [entry["uri"]],
                    "suites": entry["suites"],
                    "components": entry["components"],
                    "signed_by": args["keyring"],
                }
            ),
        )
        try:
            answer = apt.plan(done["stdout"], settings)
            if answer["needs_all_packages"] and answer["version_read_ok"]:
                every = read_command(self, apt.ALL_PACKAGES_SCRIPT, [], task_vars)
                if every.get("rc"):
                    raise AnsibleActionFail(
                        "dpkg-query could not list the installed packages: %s" % every["stderr"]
                    )
                answer = apt.plan(done["stdout"], settings, every["stdout_lines"])
        except apt.AptPlanError as exc:
            raise AnsibleActionFail("kubegpu.gpu.nvidia_driver_apt: %s" % exc) from exc
        if not answer["archive_ok"]:
            raise AnsibleActionFail(
                "nvidia_driver_source is 'distribution', but no APT source of this host provides "
                "'%s main' (apt-get indextargets lists none): configure the OS archive (or a "
                "mirror of it) first; the role adds only the components %s to the archive the "
                "host already uses." % (args["release"], " ".join(args["components"]))
            )
        sources_pending = bool(
            answer["helpers_missing"]
            or answer["source_files"]
            or not distribution
            or answer["lists_age"] > apt.LISTS_MAX_AGE
        )
        if not answer["version_read_ok"] and (args["reread"] or not sources_pending):
            raise AnsibleActionFail(
                "apt-cache policy %s failed on the node: %s"
                % (names["version_package"], done["stderr"] or "(no message)")
            )
        answer["sources_pending"] = sources_pending
        answer.update(
            names=names, packages=packages, pin=names["pin"], rows_query=list(apt.ROWS_QUERY)
        )
        answer.update(apt.settle(answer, dict(host, **{k: args[k] for k in _SETTLE_ARGS})))
        result.update(answer)
        result["changed"] = False
        return result
