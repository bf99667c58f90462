"""Every `nodecert_*` inventory variable, in one table: its name, type, default, where it
goes, who reads it and what it means.

The strict reader (`reader.py`: an unknown `nodecert_*` variable is an error naming the
closest known one), `nodecert inventory check`, the order spec (HostSpec), the plan's
spec sent to each node and the table in docs/inventory.md all come from this table.

Where a variable goes (`goes`):
  order       a HostSpec attribute (the order spec: what was bought)
  validation  HostSpec.validation, read on the control side
  plan        HostSpec.validation, and sent to the node in the plan's spec (its checks
              read it there)
  hostvars    read from the host's variables by the subsystem named in `read_by`
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nodecert.stack.manifest import SUPPORTED_OS

# kind: int (an integer >= 0), int+ (> 0), bool, str, list, secret (never kept), gpu (a
# known GPU model), os, stack (a known stack), or a mapping with its own reader (map,
# fabric, sharedfs, container, bmc, cluster, rack: inventory/maps.py).
KINDS = ("int", "int+", "bool", "str", "list", "secret", "gpu", "os", "stack",
         "map", "fabric", "sharedfs", "container", "bmc", "cluster", "rack")
GOES = ("order", "validation", "plan", "hostvars")
PREFIX = "nodecert_"


@dataclass(frozen=True)
class Variable:
    name: str
    kind: str
    goes: str
    read_by: str
    doc: str
    required: bool = False
    default: Any = None
    page: str = "docs/inventory.md"

    @property
    def key(self) -> str:
        """The name without its prefix: the HostSpec attribute, validation or plan key."""
        return self.name.removeprefix(PREFIX)


def _v(name: str, kind: str, goes: str, read_by: str, doc: str, **kw: Any) -> Variable:
    return Variable(PREFIX + name, kind, goes, read_by, doc, **kw)


VARIABLES: tuple[Variable, ...] = (
    # The order spec: every host must say what was ordered.
    _v("gpu_model", "gpu", "order", "hardware.inventory, thresholds, gate",
       "GPU model as ordered, e.g. H200-SXM", required=True),
    _v("gpu_count", "int+", "order", "hardware.inventory", "number of GPUs ordered",
       required=True),
    _v("cpu_cores", "int+", "order", "hardware.inventory",
       "physical CPU cores in total (all sockets)", required=True),
    _v("ram_gb", "int+", "order", "hardware.inventory", "installed RAM in GB", required=True),
    _v("nvme_count", "int", "order", "hardware.inventory", "number of NVMe data drives",
       required=True),
    _v("nvme_min_gb", "int", "order", "hardware.inventory",
       "minimum size of each NVMe drive in GB"),
    _v("os", "os", "order", "provision (gate)",
       "expected OS, one of " + ", ".join(SUPPORTED_OS)),
    _v("stack", "stack", "order", "provision, validate (stack.conformance)",
       "stack to provision on this host"),
    _v("simulated", "bool", "order", "validate, certify", "set by `nodecert lab` on simulated "
       "hosts", default=False),
    _v("lab_profile", "str", "hostvars", "lab", "lab hardware profile (set by `nodecert lab up`)"),
    # Validation: optional order details and per-host settings.
    _v("cpu_model", "str", "plan", "hardware.inventory",
       "CPU model as ordered (substring of lscpu's Model name)"),
    _v("nvme_rated_seq_read_mbps", "int", "plan", "storage.fio",
       "datasheet sequential read, MB/s"),
    _v("nvme_rated_seq_write_mbps", "int", "plan", "storage.fio",
       "datasheet sequential write, MB/s"),
    _v("nvme_rated_rand_read_iops", "int", "plan", "storage.fio",
       "datasheet 4 KiB random read IOPS"),
    _v("mig_enabled", "bool", "plan", "platform checks (MIG)",
       "GPUs ordered in MIG mode (default: whole GPUs, MIG disabled)", default=False),
    _v("storage_targets", "list", "validation", "storage.fio (plan)",
       "scratch directories (or allowed raw devices) the storage test may write to",
       default="/var/lib/nodecert/scratch", page="docs/validation.md"),
    _v("allow_raw_devices", "list", "validation", "storage.fio (plan)",
       "raw block devices the storage test may overwrite when proven empty",
       page="docs/validation.md"),
    _v("firmware_recipe", "str", "validation", "firmware.recipe",
       "the firmware recipe the host ships with (a name from stacks/firmware/, e.g. "
       "dgx-gb200-compute-tray, or a path): every component judged by firmware.recipe",
       page="docs/firmware.md"),
    _v("firmware", "map", "validation", "firmware.recipe",
       "the site's components over the recipe's: {component: version} or {component: "
       "{version, redfish: [Id pattern], inband: gpu_vbios|hca_firmware}}",
       page="docs/firmware.md"),
    _v("firmware_images", "map", "validation", "firmware apply",
       "the sha256 of each component's image as the vendor's package ships it "
       "({component: sha256}): firmware apply pushes only an image the site pinned here "
       "(or the recipe pins), never one only the mirror's manifest names",
       page="docs/firmware.md"),
    _v("bios_profile", "str", "validation", "bmc.bios",
       "the BIOS settings the host needs (a name from stacks/bios/, e.g. dell-poweredge-gpu, "
       "or a path): every attribute judged by bmc.bios", page="docs/firmware.md"),
    _v("bios", "map", "validation", "bmc.bios",
       "the site's BIOS attributes over the profile's: {attribute: value}",
       page="docs/firmware.md"),
    _v("allow_advisories", "list", "plan", "gate, stack.advisories",
       "security advisories this site accepts on the host (ids from `nodecert stack "
       "advisories`): each stays a WARN, named in the gate and the certificate",
       page="docs/security.md"),
    _v("attestation", "bool", "plan", "attestation.gpu",
       "collect the GPUs' attestation evidence and verify it with NVIDIA's local verifier "
       "(attestation.gpu); GPUs that offer none are reported as not attested",
       default=False, page="docs/attestation.md"),
    _v("attestation_python", "str", "plan", "attestation.gpu",
       "the Python that has nv-local-gpu-verifier installed on the node",
       default="/opt/nodecert/attest/bin/python3", page="docs/attestation.md"),
    _v("attestation_rim_dirs", "list", "plan", "attestation.gpu",
       "directories on the node holding NVIDIA's reference manifests (RIMs), named by RIM "
       "id, carried in the mirror", default="/opt/nodecert/attest/rims",
       page="docs/attestation.md"),
    _v("thresholds", "map", "validation", "thresholds",
       "threshold overrides {key: value}, e.g. {storage.seq_read_mbps_min: 3000}",
       page="docs/validation.md"),
    _v("fabric", "fabric", "plan", "net.ib, net.roce, topology",
       "the RDMA fabric each node must have: {link_layer: InfiniBand|Ethernet, ports, "
       "rate_gbps, width, firmware, devices, gpu_nic_affinity, gpudirect, roce: {gid_type, "
       "pfc_priorities, trust, ecn_priorities}}"),
    _v("cabling_plan", "str", "plan", "inventory check, fabric.cabling",
       "the cable plan (CSV: node, port, rail, switch, switch_port, ...) the fabric must "
       "be wired to; `nodecert inventory check` reads it against the inventory's hosts",
       page="docs/cabling.md"),
    _v("shared_fs", "sharedfs", "plan", "storage.shared, cluster storage",
       "the shared file system every node reads its data from: {mounts: [{path, type}], "
       "read_mbps_min, aggregate_read_mbps_min, checkpoint_mbps_min, small_files_per_s_min, "
       "gds_read_mbps_min, checkpoint_mb, size_mb, aggregate_read_s}", page="docs/datapath.md"),
    _v("container", "container", "plan", "container.gpu_smoke",
       "the GPU container every node must run (container.gpu_smoke): {engine: "
       "podman|docker, image: NAME@sha256:..., archive, image_id, cdi_spec}",
       page="docs/containers.md"),
    _v("bmc", "bmc", "validation", "bmc.* (the controller)",
       "the node's BMC, read out of band by the controller: {address, protocol: "
       "redfish|ipmi, port, ca_file | cert_sha256, username, password_file, firmware, "
       "psu_spares, sample_s, timeout_s}", page="docs/bmc.md"),
    _v("bmc_password", "secret", "hostvars", "bmc.* (the controller)",
       "the BMC password, encrypted with ansible-vault (or password_file in nodecert_bmc)",
       page="docs/bmc.md"),
    _v("rack", "rack", "plan", "fabric.nvlink_domain, fabric.imex, the inventory check",
       "the rack-scale NVLink domain this host is a compute tray of: {name, kind (a rack "
       "kind of rack.md), gpus, imex, switch_trays: [{name, address}], "
       "power_shelves: [{name, address}], cdu: {name, address}}", page="docs/rack.md"),
    # Cluster validation.
    _v("cluster", "cluster", "hostvars", "cluster validate, rack validate, revalidate --via-slurm",
       "how the site runs multi-node jobs: {engine: slurm|mpirun, launch_host, partition, "
       "account, reservation, ...}", page="docs/cluster.md"),
    _v("engine_name", "str", "hostvars", "cluster validate",
       "the node's name in Slurm / the mpirun hostfile", default="its inventory name",
       page="docs/cluster.md"),
)

BY_NAME: dict[str, Variable] = {v.name: v for v in VARIABLES}
ORDER = tuple(v for v in VARIABLES if v.goes == "order")
VALIDATION = tuple(v for v in VARIABLES if v.goes in ("validation", "plan"))
PLAN = tuple(v for v in VARIABLES if v.goes == "plan")
REQUIRED = tuple(v.name for v in VARIABLES if v.required)

__all__ = ["BY_NAME", "GOES", "KINDS", "ORDER", "PLAN", "PREFIX", "REQUIRED", "VALIDATION",
           "VARIABLES", "Variable"]
