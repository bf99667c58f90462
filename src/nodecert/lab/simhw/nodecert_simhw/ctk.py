"""nvidia-ctk (the NVIDIA Container Toolkit's CLI) and nvidia-cdi-hook, for the lab.

`nvidia-ctk cdi generate` writes a CDI spec in the toolkit's own layout (cdiVersion
0.5.0, kind nvidia.com/gpu, keys in the order nvidia-ctk writes them, one device per
GPU index and UUID and "all", the enable-cuda-compat hook naming the driver it was
generated for). What a lab container needs to see the simulated GPUs is what the real
spec gives a container: the driver's tools and files bind-mounted from the host (here
the simulated nvidia-smi and the hardware model), and device nodes (here the host's
/dev/null under the GPUs' names: there is no GPU device).

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

import os
import sys

from nodecert_simhw.state import driver_version, gpu_identity, installed, load_hw, visible_gpus

VERSION = "1.17.8"
COMMIT = "f202b80a9b9d0db00d9b1d73c0128c8962c55f4d"
SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
# What the driver's files are, in the lab: the simulator and its inputs.
MOUNTS = ("/usr/bin/nvidia-smi", "/usr/lib/nodecert-lab", "/etc/nodecert-lab",
          "/usr/share/nodecert-lab/installed", "/run/nodecert-lab")


def _info(msg):
    sys.stderr.write(f"INFO[0000] {msg}\n")


def _device(name, index):
    return ['- containerEdits:',
            '    deviceNodes:',
            '    - hostPath: /dev/null',
            f'      path: /dev/nvidia{index}',
            f'  name: "{name}"' if name.isdigit() else f'  name: {name}']


def spec_text(hw, drv):
    gpus = visible_gpus(hw)
    lines = ["---", "cdiVersion: 0.5.0", "containerEdits:", "  deviceNodes:"]
    for node in ("nvidia-uvm", "nvidia-uvm-tools", "nvidiactl"):
        lines += ["  - hostPath: /dev/null", f"    path: /dev/{node}"]
    lines += ["  env:", "  - NVIDIA_VISIBLE_DEVICES=void", "  hooks:",
              "  - args:", "    - nvidia-cdi-hook", "    - enable-cuda-compat",
              f"    - --host-driver-version={drv}", "    env:", "    - NVIDIA_CTK_DEBUG=false",
              "    hookName: createContainer", "    path: /usr/bin/nvidia-cdi-hook",
              "  mounts:"]
    for path in MOUNTS:
        lines += [f"  - containerPath: {path}", f"    hostPath: {path}", "    options:",
                  "    - ro", "    - nosuid", "    - nodev", "    - bind"]
    lines.append("devices:")
    for i in gpus:
        lines += _device(str(i), i)
        lines += _device(gpu_identity(hw, i)["uuid"], i)
    lines += ["- containerEdits:", "    deviceNodes:"]
    for i in gpus:
        lines += ["    - hostPath: /dev/null", f"      path: /dev/nvidia{i}"]
    lines += ["  name: all", "kind: nvidia.com/gpu", ""]
    return "\n".join(lines)


def _generate(argv):
    out, fmt = None, "yaml"
    for a in argv:
        if a.startswith("--output="):
            out = a.split("=", 1)[1]
        elif a.startswith("--format="):
            fmt = a.split("=", 1)[1]
    if fmt != "yaml":
        sys.stderr.write("ERRO[0000] the lab's nvidia-ctk writes YAML only\n")
        return 1
    drv = driver_version(installed())
    if drv is None:
        sys.stderr.write("ERRO[0000] failed to generate CDI spec: failed to create device "
                         "CDI specs: failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND\n")
        return 1
    text = spec_text(load_hw(), drv)
    _info("Using driver version " + drv)
    if out is None:
        sys.stdout.write(text)
        return 0
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, out)
    _info("Generated CDI spec with version 0.5.0")
    return 0


def _list():
    names = []
    for d in SPEC_DIRS:
        if not os.path.isdir(d):
            continue
        for f in sorted(os.listdir(d)):
            if not f.endswith((".yaml", ".json")):
                continue
            with open(os.path.join(d, f)) as fh:
                text = fh.read()
            kind = next((ln.split(":", 1)[1].strip() for ln in text.splitlines()
                         if ln.startswith("kind:")), "")
            in_devices = False
            for ln in text.splitlines():
                if ln.startswith("devices:"):
                    in_devices = True
                elif ln and not ln[0].isspace() and not ln.startswith("-"):
                    in_devices = False
                elif in_devices and ln.startswith("  name: "):
                    names.append(f"{kind}={ln.split(':', 1)[1].strip().strip(chr(34))}")
    _info(f"Found {len(names)} CDI devices")
    for n in names:
        print(n)
    return 0


def cmd_nvidia_ctk(argv):
    if not argv or argv[0] in ("-v", "--version", "version"):
        print(f"NVIDIA Container Toolkit CLI version {VERSION}\ncommit: {COMMIT}")
        return 0
    if argv[:2] == ["cdi", "generate"]:
        return _generate(argv[2:])
    if argv[:2] == ["cdi", "list"]:
        return _list()
    if argv[:2] == ["runtime", "configure"]:
        sys.stderr.write("ERRO[0000] the lab's engine is podman: it reads CDI specs itself\n")
        return 1
    sys.stderr.write(f"Incorrect Usage: unknown command {' '.join(argv[:2])!r}\n")
    return 1


def cmd_nvidia_cdi_hook(argv):
    """The hooks a CDI spec asks the runtime to run: nothing to do on simulated GPUs."""
    del argv
    return 0
