"""kubelet_config's record: what it changed in each kubelet file, and undoing exactly that, with
every later edit of someone else kept (module_utils/kubelet_record.py)."""

from __future__ import annotations

from typing import Any

import yaml
from ansible_collections.kubegpu.gpu.plugins.module_utils import kubelet as k
from ansible_collections.kubegpu.gpu.plugins.module_utils import kubelet_record as kr


def load(text: str) -> Any:
    return yaml.safe_load(text)


def dump(data: Any) -> str:
    return yaml.safe_dump(data, default_flow_style=False, sort_keys=False)


def write(record: dict[str, Any] | None, path: str, kind: str, before: str | None, after: str):
    return kr.record_write(record, path, kind, before, after, load)


CONFIG = dump(
    {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "systemd",
        "featureGates": {"KubeletTracing": False},
    }
)


def test_a_kubelet_config_gets_back_its_own_values_and_keeps_later_edits() -> None:
    ours = k.merge_kubelet_config(
        load(CONFIG),
        {"KubeletTracing": True, "DynamicResourceAllocation": True},
        {"maxPods": 200, "evictionHard": {"memory.available": "5%"}},
    )
    after = dump(ours)
    record = write(None, "/var/lib/kubelet/config.yaml", "config", CONFIG, after)
    entry = record["files"]["/var/lib/kubelet/config.yaml"]
    assert entry["created"] is False
    assert entry["entries"] == {
        '["featureGates", "KubeletTracing"]': {"set": True, "before": False},
        '["featureGates", "DynamicResourceAllocation"]': {"set": True},
        '["maxPods"]': {"set": 200},
        '["evictionHard", "memory.available"]': {"set": "5%"},
    }
    # Later, someone else sets a field of their own and changes maxPods.
    edited = load(after)
    edited["maxPods"] = 110
    edited["serializeImagePulls"] = False
    text, undone, kept = kr.undo(entry, dump(edited), load, dump)
    assert kept == ['["maxPods"]']
    assert len(undone) == 3
    assert load(text) == {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "systemd",
        "featureGates": {"KubeletTracing": False},
        "maxPods": 110,
        "serializeImagePulls": False,
    }


def test_the_first_value_before_is_kept_across_runs() -> None:
    first = dump(k.merge_kubelet_config(load(CONFIG), {"KubeletTracing": True}))
    record = write(None, "c", "config", CONFIG, first)
    second = dump(k.merge_kubelet_config(load(first), {"KubeletTracing": False}))
    record = write(record, "c", "config", first, second)
    assert record["files"]["c"]["entries"]['["featureGates", "KubeletTracing"]'] == {
        "set": False,
        "before": False,
    }


def test_a_file_kubegpu_created_goes_when_only_its_entries_were_in_it() -> None:
    after = dump(k.build_dropin_config({"KubeletTracing": True}))
    record = write(None, "/var/lib/kubelet/config.yaml", "config", None, after)
    entry = record["files"]["/var/lib/kubelet/config.yaml"]
    assert kr.undo(entry, after, load, dump)[0] is None
    # With a field of someone else's, it stays, without kubegpu's.
    other = dict(load(after), maxPods=50)
    text, _, _ = kr.undo(entry, dump(other), load, dump)
    assert load(text) == {"maxPods": 50}


EXTRA_ARGS = '# set by the admin\nKUBELET_EXTRA_ARGS="--node-labels=site=a --v=2"\nOTHER=1\n'


def test_the_extra_args_file_loses_only_kubegpus_labels_taints_and_flags() -> None:
    taint = {"key": "nvidia.com/gpu", "value": "", "effect": "NoSchedule"}
    after = k.merge_extra_args_file(
        EXTRA_ARGS,
        {"nvidia.com/gpu.present": "true", "site": "b"},
        [taint],
        {"--config-dir": "/etc/kubernetes/kubelet.conf.d"},
    )
    record = write(None, "/etc/default/kubelet", "args", EXTRA_ARGS, after)
    entries = record["files"]["/etc/default/kubelet"]["entries"]
    assert entries['["label", "site"]'] == {"set": "b", "before": "a"}
    assert entries['["label", "nvidia.com/gpu.present"]'] == {"set": "true"}
    assert entries['["taint", "nvidia.com/gpu", "NoSchedule"]'] == {
        "set": "nvidia.com/gpu:NoSchedule"
    }
    assert entries['["flag", "--config-dir"]'] == {"set": "/etc/kubernetes/kubelet.conf.d"}
    # Someone adds a label of their own afterwards.
    edited = after.replace("--node-labels=", "--node-labels=team=x,")
    text, _, kept = kr.undo(record["files"]["/etc/default/kubelet"], edited, load, dump)
    assert kept == []
    assert (
        text
        == '# set by the admin\nKUBELET_EXTRA_ARGS="--node-labels=team=x,site=a --v=2"\nOTHER=1\n'
    )


def test_an_extra_args_file_kubegpu_created_goes_whole() -> None:
    after = k.merge_extra_args_file(
        "", {"a": "1"}, [], {}, {"KUBELET_CONFIG_DROPIN_DIR_ALPHA": "on"}
    )
    record = write(None, "/etc/default/kubelet", "args", None, after)
    assert kr.undo(record["files"]["/etc/default/kubelet"], after, load, dump)[0] is None


RANCHER = dump({"token": "s3cret", "node-label": ["site=a"], "kubelet-arg": ["v=2"]})


def test_a_rancher_config_keeps_its_token_and_loses_kubegpus_part() -> None:
    merged = k.merge_rancher_config(
        load(RANCHER),
        {"nvidia.com/gpu.present": "true"},
        [{"key": "nvidia.com/gpu", "value": "", "effect": "NoSchedule"}],
        {"config-dir": "/etc/rancher/k3s/kubelet.conf.d"},
        {"KubeletTracing": True},
    )
    after = dump(merged)
    record = write(None, "/etc/rancher/k3s/config.yaml", "rancher", RANCHER, after)
    entries = record["files"]["/etc/rancher/k3s/config.yaml"]["entries"]
    assert set(entries) == {
        '["label", "nvidia.com/gpu.present"]',
        '["taint", "nvidia.com/gpu", "NoSchedule"]',
        '["arg", "config-dir"]',
        '["gate", "KubeletTracing"]',
    }
    edited = load(after)
    edited["kubelet-arg"].append("max-pods=50")
    text, undone, kept = kr.undo(
        record["files"]["/etc/rancher/k3s/config.yaml"], dump(edited), load, dump
    )
    assert (len(undone), kept) == (4, [])
    assert load(text) == {
        "token": "s3cret",
        "node-label": ["site=a"],
        "kubelet-arg": ["v=2", "max-pods=50"],
    }


def test_kubegpus_drop_in_goes_whole_and_a_missing_file_is_left_alone() -> None:
    record = write(None, "/etc/kubernetes/kubelet.conf.d/50-kubegpu.conf", "owned", None, "x: 1\n")
    entry = record["files"]["/etc/kubernetes/kubelet.conf.d/50-kubegpu.conf"]
    assert kr.undo(entry, "x: 1\n", load, dump)[0] is None
    assert kr.undo(entry, None, load, dump) == (None, [], [])
