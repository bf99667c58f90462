"""Where the lab keeps its state, and the names it gives what it creates.

Every kernel object the lab creates carries its prefix, so a later run (or
`nodecert lab down` after a crash) can find and remove exactly its own leftovers
and nothing else: the bridge has the interface alias ``nodecert-lab <identity>``,
network namespaces are ``<prefix>-h<N>``, overlay mounts have source
``<prefix>-h<N>``. The names derive from the lab's identity (its directory, state and
subnet), so a second lab set up with ``NODECERT_LAB_DIR`` or ``NODECERT_LAB_SUBNET``
gets names of its own and never takes the first one's objects for leftovers.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from nodecert.core.errors import NodecertError
from nodecert.core.paths import Member

BRIDGE_ALIAS = "nodecert-lab"
STANDARD_ROOT = Path("/var/tmp/nodecert-lab")
STANDARD_SUBNET = ipaddress.IPv4Network("10.78.0.0/24")
DEFAULT_ROOT = Path(os.environ.get("NODECERT_LAB_DIR", str(STANDARD_ROOT)))
DEFAULT_SUBNET = ipaddress.IPv4Network(os.environ.get("NODECERT_LAB_SUBNET",
                                                      str(STANDARD_SUBNET)))
# Bumped whenever the base recipe changes, so an old base is rebuilt, not reused.
BASE_RECIPE = "bookworm-minbase-v6-podman-quiet"
BASE_PACKAGES = ("openssh-server", "python3", "python3-apt", "systemd", "systemd-sysv", "dbus",
                 "iproute2", "sudo", "procps", "kmod",
                 # the container engine a host runs GPU containers with (container.gpu_smoke):
                 # in the base, so that no provisioning of a lab host installs it
                 "podman", "crun")
# The engines a cluster runs its jobs on, from Debian: Slurm (with munge) and OpenMPI.
# In the base so that a 16-host lab needs no install per host; their services stay off
# until `lab up --cluster` gives the hosts a munge key and a slurm.conf.
CLUSTER_PACKAGES = ("munge", "slurmd", "slurmctld", "slurm-client", "openmpi-bin")
CLUSTER_UNITS = ("munge.service", "slurmd.service", "slurmctld.service")
MAX_HOSTS = 200
# How long a lab waits for another lab on this machine to finish building the shared
# base and mirror (a cold build takes about ten minutes).
SHARED_BUILD_WAIT_S = 1800.0


# A host's simulated hardware description, under its directory: the simulator on the
# host reads /etc/nodecert-lab/hardware.json, its BMC (outside the host) this path.
HOST_HARDWARE = Path("root/etc/nodecert-lab/hardware.json")

@dataclass(frozen=True)
class LabConfig:
    root: Path = DEFAULT_ROOT
    subnet: ipaddress.IPv4Network = field(default=DEFAULT_SUBNET)
    # "" (the default): derived from the identity, "nclab0"/"nclab" for the standard one
    bridge: str = ""
    prefix: str = ""
    suite: str = "bookworm"
    # Several labs can share one base and mirror (tests run their own lab next to a
    # user's) as long as each has its own state directory, bridge, prefix and subnet.
    # "" (the default): "state", or "state-<tag>" for a lab on another subnet.
    state_name: str = ""

    def __post_init__(self) -> None:
        standard = self.root == STANDARD_ROOT and self.subnet == STANDARD_SUBNET
        tag = hashlib.sha256(f"{self.root}|{self.subnet}".encode()).hexdigest()[:5]
        if not self.prefix:
            object.__setattr__(self, "prefix", "nclab" if standard else f"nc{tag}")
        if not self.bridge:
            object.__setattr__(self, "bridge", f"{self.prefix}0")
        if not self.state_name:
            object.__setattr__(self, "state_name", "state" if self.subnet == STANDARD_SUBNET
                               else f"state-{tag}")

    @property
    def alias(self) -> str:
        """The bridge's interface alias: the lab's tag and which lab (its state) made it."""
        who = hashlib.sha256(f"{self.root}|{self.state_name}".encode()).hexdigest()[:12]
        return f"{BRIDGE_ALIAS} {who}"

    def claim_root(self) -> Path:
        """The lab's directory, proven ours before anything is read from or built in it.

        It sits at a fixed name in a shared temporary directory (so that labs share one
        base image across runs): if someone else created it first, or made it writable
        for others, or put a link there, the lab refuses to use it."""
        root = self.root
        if not os.path.lexists(root):
            # A lab coming up at the same moment may make it first: checked below as any.
            with contextlib.suppress(FileExistsError):
                root.mkdir(mode=0o755, parents=True)
        st = os.lstat(root)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise NodecertError(f"{root} is not a directory (a link?): the lab will not "
                                "use it", hint="remove it, or set NODECERT_LAB_DIR")
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise NodecertError(f"{root} belongs to uid {st.st_uid} or others may write "
                                "to it: the lab will not build root's hosts there",
                                hint="remove it (it is not the lab's), or set "
                                     "NODECERT_LAB_DIR to a directory of your own")
        return root

    @contextlib.contextmanager
    def shared_build(self, wait_s: float = SHARED_BUILD_WAIT_S) -> Iterator[None]:
        """Hold the lock on what labs share (base, mirror, package cache) while building
        or checking it: two labs coming up at once must not both build, or one read the
        other's half-built tree."""
        root = self.claim_root()
        fd = os.open(root / ".build.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600)
        try:
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise NodecertError(
                            f"another lab on this machine has been building {root}'s base "
                            f"and mirror for over {wait_s:.0f} s", hint="wait for it to "
                            "finish, or stop it (its `lab up` holds the lock)") from None
                    time.sleep(1.0)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    # what the labs under one root share: the base image, the package mirror and cache
    base = Member("root", "base")
    mirror = Member("root", "mirror")
    cache = Member("root", "cache")

    @property
    def state(self) -> Path:
        return self.root / self.state_name

    @property
    def gateway(self) -> ipaddress.IPv4Address:
        return self.subnet.network_address + 1

    def host_ip(self, n: int) -> ipaddress.IPv4Address:
        return self.subnet.network_address + 10 + n

    def netns(self, n: int) -> str:
        return f"{self.prefix}-h{n}"

    def veth(self, n: int) -> str:
        return f"{self.prefix}v{n}"

    def host_dir(self, n: int) -> Path:
        return self.state / "hosts" / f"h{n}"

    def hardware_file(self, n: int) -> Path:
        """Host n's simulated hardware, as its tools and its BMC read it."""
        return self.host_dir(n) / HOST_HARDWARE

    @staticmethod
    def mac(n: int) -> str:
        # Fixed per host number: after a reset the neighbour caches stay valid
        # (a new random MAC costs ~30 s of lost packets, see the test-hosts recipe).
        return f"02:6e:63:00:{n // 256:02x}:{n % 256:02x}"
