"""Connection settings from the same places ssh and Ansible take them: the inventory's
variables and ssh arguments first, then the ssh_config file (-F, else ~/.ssh/config)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodecert.transport.ssh import Endpoint, bastion


def _config(tmp_path: Path) -> Path:
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host gpu-* 10.9.0.*\n  User ops\n  Port 2222\n  IdentityFile ~/keys/site\n"
                   "  UserKnownHostsFile /etc/site/known_hosts\n  ProxyJump jump\n\n"
                   "Host gpu-07\n  HostName 10.9.0.7\n  HostKeyAlias gpu-07\n\n"
                   "Host jump\n  HostName 192.0.2.10\n  User bastion\n  Port 2200\n"
                   "  IdentityFile /etc/site/jump_key\n")
    return cfg


def test_ssh_config_fills_what_the_inventory_leaves_open(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    cfg = _config(tmp_path)
    ep = Endpoint.from_hostvars("gpu-07", {"ansible_ssh_common_args": f"-F {cfg}"})
    assert (ep.address, ep.port, ep.user) == ("10.9.0.7", 2222, "ops")
    assert ep.key_file == str(tmp_path / "keys" / "site")
    assert ep.known_hosts == ("/etc/site/known_hosts",)
    assert ep.proxy_jump == "jump" and ep.host_key_alias == "gpu-07"
    jump = bastion(ep)
    assert (jump.address, jump.port, jump.user, jump.key_file) == (
        "192.0.2.10", 2200, "bastion", "/etc/site/jump_key")
    assert "/etc/site/known_hosts" in jump.known_hosts  # the node's known hosts too
    # the inventory and the command line win over the file, as they do for ssh
    ep = Endpoint.from_hostvars("gpu-07", {
        "ansible_ssh_common_args": f"-F {cfg} -o ProxyJump=admin@192.0.2.99:22",
        "ansible_user": "svc", "ansible_port": 22, "ansible_ssh_private_key_file": "/k"})
    assert (ep.user, ep.port, ep.key_file, ep.proxy_jump) == ("svc", 22, "/k",
                                                              "admin@192.0.2.99:22")
    assert bastion(ep).user == "admin"


def test_the_users_own_ssh_config_is_read(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    _config(tmp_path).rename(tmp_path / ".ssh" / "config")
    ep = Endpoint.from_hostvars("gpu-01", {"ansible_host": "10.9.0.1"})
    assert (ep.address, ep.user, ep.port) == ("10.9.0.1", "ops", 2222)
    # a host no block matches: Ansible's and ssh's defaults
    other = Endpoint.from_hostvars("cpu-01", {"ansible_host": "198.51.100.1"})
    assert (other.user, other.port, other.proxy_jump, other.key_file) == (
        "root", 22, None, None)
