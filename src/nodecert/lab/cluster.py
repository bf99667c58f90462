"""The lab as a cluster: real Slurm (munge, slurmctld on the head host, slurmd on every
host) and host-to-host SSH for OpenMPI's mpirun, all from the Debian packages in the
lab's base. Written into each host's root before it boots; the services start with it.

The munge key and the hosts' SSH key are made per lab (never shared with another lab,
never in the base); every host knows every other host's host key, so mpirun's SSH
checks them strictly like everything else in the lab.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from nodecert.core.shell import run
from nodecert.lab.config import CLUSTER_UNITS, LabConfig
from nodecert.stack.manifest import find_stack
from nodecert.validation.plan import framework_plan

PARTITION = "gpu"
IDLE_PARTITION = "nodecert-idle"  # idle checks: preempted by any job of PARTITION
HEAD = "h1"
SLURM_CONF = """# Written by `nodecert lab up --cluster`: the lab's Slurm cluster.
ClusterName=nodecert-lab
SlurmctldHost={head}
AuthType=auth/munge
CredType=cred/munge
SlurmUser=slurm
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
# Lab hosts share one kernel and have no cgroup of their own to hand out.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=30
# The hosts' GPUs are simulated: no gres, each host one CPU to Slurm (an exclusive job
# owns the node).
NodeName=h[1-{last}] CPUs=1 RealMemory=1 State=UNKNOWN
# Users' jobs preempt (cancel) idle checks: the idle partition's lower tier gives way.
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
PartitionName={partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=10
PartitionName={idle} Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=CANCEL
"""


def _ids(root: Path, user: str) -> tuple[int, int]:
    """The uid and gid of a user in the host's own /etc/passwd (not this machine's)."""
    for line in (root / "etc/passwd").read_text().splitlines():
        f = line.split(":")
        if f[0] == user:
            return int(f[2]), int(f[3])
    raise KeyError(user)


def lab_secrets(cfg: LabConfig) -> tuple[Path, Path]:
    """The lab's munge key and its hosts' SSH key, made once per lab state."""
    key = cfg.state / "munge.key"
    if not key.exists():
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(1024))
    ssh = cfg.state / "cluster_ed25519"
    if not ssh.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "nodecert-lab-cluster",
             "-f", str(ssh)], timeout=30)
    return key, ssh


def prepare_host(cfg: LabConfig, root: Path, total: int) -> None:
    """Give one host (its root, before boot) Slurm, munge and the cluster SSH key."""
    munge_key, ssh_key = lab_secrets(cfg)
    uid, gid = _ids(root, "munge")
    dest = root / "etc/munge/munge.key"
    dest.write_bytes(munge_key.read_bytes())
    os.chown(dest, uid, gid)
    dest.chmod(0o400)
    (root / "etc/slurm/slurm.conf").write_text(
        SLURM_CONF.format(head=HEAD, last=total, partition=PARTITION,
                          idle=IDLE_PARTITION))
    wants = root / "etc/systemd/system/multi-user.target.wants"
    for unit in CLUSTER_UNITS:
        if unit == "slurmctld.service" and (root / "etc/hostname").read_text().strip() != HEAD:
            continue
        link = wants / unit
        link.unlink(missing_ok=True)
        link.symlink_to(f"/lib/systemd/system/{unit}")
    ssh = root / "root/.ssh"
    priv = ssh / "id_ed25519"
    priv.write_bytes(ssh_key.read_bytes())
    priv.chmod(0o600)
    (ssh / "id_ed25519.pub").write_text(ssh_key.with_suffix(".pub").read_text())
    auth = ssh / "authorized_keys"
    auth.write_text(auth.read_text() + ssh_key.with_suffix(".pub").read_text())
    (ssh / "config").write_text("Host h*\n  StrictHostKeyChecking yes\n  BatchMode yes\n"
                                "  ConnectTimeout 5\n  LogLevel ERROR\n")


def known_hosts(cfg: LabConfig, hosts: list[tuple[str, str, int]]) -> str:
    """Every host's key under its name and address: (name, ip, n) each."""
    lines = []
    for name, ip, n in hosts:
        pub = (cfg.host_dir(n) / "keys/ssh_host_ed25519_key.pub").read_text().split()
        lines.append(f"{name},{ip} {pub[0]} {pub[1]}")
    return "\n".join(lines) + "\n"


def write_known_hosts(cfg: LabConfig, hosts: list[tuple[str, str, int]]) -> None:
    text = known_hosts(cfg, hosts)
    for _, _, n in hosts:
        (cfg.host_dir(n) / "root/etc/ssh/ssh_known_hosts").write_text(text)


# The stack whose driver and NCCL a cluster lab's hosts carry, as provisioning pins them.
JOB_STACK, JOB_OS = "r580-cuda13.0", "debian-12"
JOB_TOOLS = ("nccl-tests", "perftest", "infiniband-diags", "mlnx-tools", "fio")


def job_tools_script() -> str:
    """What a cluster's jobs need on every host (what provisioning leaves on a real one):
    the pinned driver and NCCL from the lab's NVIDIA repository, nccl-tests, perftest,
    the RDMA diagnostics, and the stack's framework environment (its PyTorch from the
    lab's wheelhouse) where the training jobs run."""
    stack = find_stack(JOB_STACK)
    pins = [f"{p.name}={p.version}" for p in stack.os[JOB_OS].packages
            if p.component in ("driver", "nccl") and not p.name.endswith("-dev")]
    env = framework_plan(stack)["python"].rsplit("/bin/", 1)[0]
    return ("echo 'deb [trusted=yes] file:/srv/nodecert-mirror/nvidia ./' > "
            "/etc/apt/sources.list.d/nodecert-lab-nvidia.list && apt-get update -qq && "
            f"apt-get install -y -qq {' '.join(pins + list(JOB_TOOLS))} python3-venv "
            f">/dev/null && python3 -m venv {env} && {env}/bin/pip install -q "
            "--disable-pip-version-check --index-url file:///srv/nodecert-mirror/simple "
            f"torch=={stack.framework.pytorch} >/dev/null")


# The cluster's shared file system: nfs-ganesha (user space: this machine's kernel has no
# NFS server) exports a directory of the head host over NFSv3/TCP; every host mounts it
# at SHARED_MOUNT with the lab's client (simhw/nfsfuse.py: FUSE over libnfs, this
# kernel having no NFS client either).
SHARED_MOUNT = "/mnt/nodecert-shared"
EXPORT = "/srv/nodecert-export"
MOUNT_PORT = 20048  # mountd's port, fixed so the client needs no portmapper lookup
# NFS's own port, given to the client for the same reason: a ganesha that started while
# rpcbind was not yet answering never registers, and a client that asks the portmapper
# then fails for as long as it tries ("nfs_service failed"; seen on a busy machine)
NFS_PORT = 2049
NFS_SERVER_PACKAGES = ("nfs-ganesha", "nfs-ganesha-vfs", "rpcbind")
NFS_CLIENT_PACKAGES = ("libnfs13", "python3-fusepy")
GANESHA_CONF = """# Written by `nodecert lab up --cluster`: the lab's NFS server.
NFS_CORE_PARAM {{ Protocols = 3; NFS_Port = {nfs}; MNT_Port = {mnt}; Enable_NLM = false;
                 Enable_RQUOTA = false; Enable_UDP = false; }}
NFSV4 {{ Graceless = true; }}
EXPORT {{ Export_Id = 1; Path = {export}; Pseudo = {export}; Access_Type = RW;
         Squash = No_Root_Squash; Protocols = 3; Transports = TCP; SecType = sys;
         FSAL {{ Name = VFS; }} }}
LOG {{ Default_Log_Level = WARN; }}
"""
NFS_UNIT = """[Unit]
Description=The nodecert lab's NFS mount (FUSE over libnfs)
After=network.target
# The server may still be starting (a busy machine): keep trying, never give up.
StartLimitIntervalSec=0

[Service]
ExecStartPre=/bin/mkdir -p {mount}
ExecStart=/usr/bin/python3 /usr/lib/nodecert-lab/nfsfuse.py {url} {mount}
ExecStopPost=-/bin/umount -l {mount}
Restart=on-failure
RestartSec=1

[Install]
WantedBy=multi-user.target
"""


def nfs_server_script() -> str:
    """On the head host: the export, ganesha's configuration, rpcbind and ganesha up."""
    conf = GANESHA_CONF.format(nfs=NFS_PORT, mnt=MOUNT_PORT, export=EXPORT)
    return (f"apt-get install -y -qq {' '.join(NFS_SERVER_PACKAGES)} >/dev/null && "
            f"cat > /etc/ganesha/ganesha.conf <<'EOF'\n"
            f"{conf}EOF\nsystemctl enable -q --now rpcbind.service && "
            "systemctl restart nfs-ganesha.service && "
            f"for i in $(seq 1 150); do ss -ltn | grep -q ':{NFS_PORT} ' && exit 0; sleep 0.2; "
            "done; journalctl -u nfs-ganesha --no-pager | tail -20; exit 1")


def nfs_client_script(server_ip: str) -> str:
    """On every host: the client, as a unit that keeps the mount; waits for it, up to
    260 s: nfs-ganesha listens before its export serves, and with three labs starting at
    once on two cores a CI rehearsal saw the mount refused ("nfs_service failed") for
    two minutes before it would have come up."""
    url = f"nfs://{server_ip}{EXPORT}?version=3&mountport={MOUNT_PORT}&nfsport={NFS_PORT}"
    unit = NFS_UNIT.format(mount=SHARED_MOUNT, url=url)
    return (f"apt-get install -y -qq {' '.join(NFS_CLIENT_PACKAGES)} >/dev/null && "
            "cat > /etc/systemd/system/nodecert-lab-nfs.service <<'EOF'\n"
            f"{unit}EOF\nsystemctl daemon-reload && "
            "systemctl enable -q --now nodecert-lab-nfs.service && "
            f"for i in $(seq 1 1300); do grep -q ' {SHARED_MOUNT} fuse.nfs ' /proc/mounts && "
            "exit 0; sleep 0.2; done; journalctl -u nodecert-lab-nfs --no-pager | tail -20; "
            "exit 1")


def slurm_idle_script(total: int) -> str:
    """On the head host: until Slurm reports every host idle (slurmd registers as it
    starts), at most a minute."""
    return (f"for i in $(seq 1 120); do [ \"$(sinfo -h -N -t idle -o %N | sort -u | wc -l)\" "
            f"= {total} ] && exit 0; sleep 0.5; done; sinfo; exit 1")


def inventory_vars() -> dict[str, object]:
    """What the lab's inventory says of its cluster (the cluster command's settings)."""
    return {"nodecert_cluster": {"engine": "slurm", "launch_host": HEAD,
                                 "partition": PARTITION},
            # the stack whose driver, NCCL and framework the hosts carry (job_tools_script)
            "nodecert_stack": JOB_STACK}


__all__ = [
    "EXPORT",
    "HEAD",
    "PARTITION",
    "SHARED_MOUNT",
    "inventory_vars",
    "job_tools_script",
    "known_hosts",
    "lab_secrets",
    "nfs_client_script",
    "nfs_server_script",
    "prepare_host",
    "slurm_idle_script",
    "write_known_hosts",
]
