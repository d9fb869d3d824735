"""The inventory and known_hosts the testbed writes for Ansible."""

from __future__ import annotations

from pathlib import Path

import yaml

from kubegpu.testbed.inventory import inventory_data, write_inventory, write_known_hosts

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDzQ2q6mYk1b1J2mQm0Hk0v0n8sJrS1Kp1yq3cRGvGQ7 root@n"


def test_inventory_groups_and_connection_vars(tmp_path: Path) -> None:
    nodes = [
        {"name": "node1", "address": "10.213.0.2", "vars": {"kubegpu_testbed_containers": True}},
        {"name": "node2", "address": "10.213.0.3"},
    ]
    data = inventory_data(
        nodes,
        key=tmp_path / "id_ed25519",
        known_hosts=tmp_path / "known_hosts",
        group_vars={"kubegpu_testbed_vendor_repo_url": "http://10.213.0.1:8231/x"},
    )
    path = tmp_path / "inventory.yml"
    write_inventory(path, data)
    loaded = yaml.safe_load(path.read_text())
    all_vars = loaded["all"]["vars"]
    assert all_vars["ansible_user"] == "root"
    assert all_vars["ansible_python_interpreter"] == "/usr/bin/python3"
    assert all_vars["ansible_ssh_private_key_file"] == str(tmp_path / "id_ed25519")
    args = all_vars["ansible_ssh_common_args"]
    assert f"UserKnownHostsFile={tmp_path / 'known_hosts'}" in args
    assert "StrictHostKeyChecking=yes" in args
    assert all_vars["kubegpu_testbed_vendor_repo_url"] == "http://10.213.0.1:8231/x"
    cluster = loaded["all"]["children"]["k8s_cluster"]["children"]
    assert list(cluster["kube_control_plane"]["hosts"]) == ["node1"]
    gpu = cluster["gpu_nodes"]["hosts"]
    assert gpu["node1"] == {"ansible_host": "10.213.0.2", "kubegpu_testbed_containers": True}
    assert gpu["node2"] == {"ansible_host": "10.213.0.3"}


def test_known_hosts_lists_address_and_name(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    write_known_hosts(path, [("node1", "10.213.0.2", KEY)])
    fields = path.read_text().split()
    assert fields == ["10.213.0.2,node1", "ssh-ed25519", KEY.split()[1]]
