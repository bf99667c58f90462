"""The container path inside a lab host: podman's settings for systemd-nspawn, and the
script that sets (and undoes) the container faults."""

from __future__ import annotations

# Podman inside a lab host: what systemd-nspawn's isolation allows. nspawn's seccomp
# filter refuses keyctl (no session keyring per container), the host's cgroups are not
# delegated (no cgroup per container), CAP_NET_ADMIN is not granted (no network
# namespace per container: the host's), and overlayfs cannot sit on the host's overlay
# root (vfs storage). The GPU path (CDI devices and mounts) is untouched by any of it.
CONTAINER_CONFIG = {
    "etc/containers/containers.conf": "# nodecert lab: what podman can do inside "
    "systemd-nspawn\n[containers]\nkeyring = false\ncgroups = \"disabled\"\nnetns = \"host\"\n",
    "etc/containers/storage.conf": "# nodecert lab: overlayfs cannot stack on the host's "
    "overlay root\n[storage]\ndriver = \"vfs\"\nrunroot = \"/run/containers/storage\"\n"
    "graphroot = \"/var/lib/containers/storage\"\n"}
_FAULT_SUFFIX = ".nodecert-lab-fault"


def container_fault_script(kinds: set[str]) -> str:
    """Undo every container fault, then set those in `kinds` (a shell script)."""
    ctk, spec = "/usr/bin/nvidia-ctk", "/etc/cdi/nvidia.yaml"
    out = [f"for f in {ctk} {spec}; do if [ -e \"$f{_FAULT_SUFFIX}\" ]; then "
           f"mv -f \"$f{_FAULT_SUFFIX}\" \"$f\"; fi; done"]
    if "toolkit_missing" in kinds:
        out.append(f"if [ -e {ctk} ]; then mv {ctk} {ctk}{_FAULT_SUFFIX}; fi")
    if "cdi_missing" in kinds:
        out.append(f"if [ -e {spec} ]; then mv {spec} {spec}{_FAULT_SUFFIX}; fi")
    elif "cdi_stale" in kinds:
        out.append(f"if [ -e {spec} ]; then cp -p {spec} {spec}{_FAULT_SUFFIX} && sed -i "
                   f"'s/--host-driver-version=[0-9.]*/--host-driver-version=570.211.01/' "
                   f"{spec}; fi")
    return "; ".join(out)


__all__ = ["CONTAINER_CONFIG", "container_fault_script"]
