"""The lab's Python wheelhouse: simulated framework wheels, served like a real mirror.

For each framework pin in the shipped stacks (`torch==2.9.1+cu130`,
`tensorflow==2.18.0`, ...) it builds a wheel with the real distribution name and
version whose module reports what the real one would -- its version, the CUDA it
was built for, the cuDNN and NCCL it bundles, the GPUs it sees (through the
host's simulated `nvidia-smi`) -- and says it is SIMULATED. They are laid out as
`wheels/` plus a PEP 503 `simple/` index with sha256 fragments, so
`pip install --index-url file:///srv/nodecert-mirror/simple torch==2.9.1+cu130`
works inside a lab host exactly as against an integrator's air-gapped index.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

from nodecert.provision.mirror import write_simple_index
from nodecert.stack.manifest import list_stacks

# What each PyTorch build bundles (the nvidia-cudnn/nccl wheels its lock file pins:
# 2.9.0+cu130, 2.8.0+cu128, the cu124 line; same-minor releases keep the pins of
# their lock).
TORCH_BUNDLES = {
    "2.9": {"13.0": ("9.13.0.50", "2.27.7"), "12.8": ("9.10.2.21", "2.27.5")},
    "2.8": {"12.8": ("9.10.2.21", "2.27.3")},
    "2.5": {"12.4": ("9.1.0.70", "2.21.5")},
}
# TensorFlow's tested build (tensorflow/docs "Tested build configurations").
TF_BUILDS = {"2.18.0": ("12.5", "9.3")}

_GPU_PROBE = '''
import shutil as _shutil
import subprocess as _subprocess


def _gpus():
    """Names of the GPUs the (simulated) driver exposes; [] without a driver."""
    exe = _shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = _subprocess.run([exe, "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, _subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    return [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
'''


def _lab_worker(*identity: str) -> str:
    """The hook nodecert's framework workers look for: a SIMULATED framework has no
    compute, so the lab host's hardware model (simhw.py) answers in the workers' own
    event format, with the host's injected faults."""
    return (
        "\n\ndef _nodecert_lab_worker(kind, args):\n"
        '    """SIMULATED compute: the lab hardware model plays the GPU work."""\n'
        "    import json, os, sys\n    sys.stdout.flush()\n"
        '    simhw = os.environ.get("NODECERT_LAB_SIMHW", "/usr/lib/nodecert-lab/simhw.py")\n'
        '    os.execv(sys.executable, [sys.executable, simhw, '
        f'"torch-worker", kind, json.dumps(args), *{list(identity)!r}])\n')


def _torch_files(version: str, cuda: str, cudnn: str, nccl: str) -> dict[str, str]:
    major, minor, patch = (int(x) for x in cudnn.split(".")[:3])
    cudnn_int = major * 10000 + minor * 100 + patch  # torch.backends.cudnn.version()
    nccl_t = tuple(int(x) for x in nccl.split("."))
    return {
        "torch/__init__.py": (
            f'"""SIMULATED PyTorch {version} of a nodecert lab host (not the real torch)."""\n'
            f"__version__ = {version!r}\n__nodecert_simulated__ = True\n"
            "from . import backends, cuda, version  # noqa: E402\n"
            + _lab_worker(version, cuda, str(cudnn_int), nccl)),
        "torch/version.py": f"__version__ = {version!r}\ncuda = {cuda!r}\n",
        "torch/cuda/__init__.py": (
            _GPU_PROBE + "\n\ndef is_available():\n    return bool(_gpus())\n\n\n"
            "def device_count():\n    return len(_gpus())\n\n\n"
            "def get_device_name(i=0):\n    return _gpus()[i]\n\n\n"
            "from . import nccl  # noqa: E402\n"),
        "torch/cuda/nccl.py": f"def version():\n    return {nccl_t!r}\n",
        "torch/backends/__init__.py": "from . import cudnn  # noqa: F401\n",
        "torch/backends/cudnn.py": f"def version():\n    return {cudnn_int}\n\n\n"
                                   "def is_available():\n    return True\n",
    }


def _tf_files(version: str, cuda: str, cudnn: str) -> dict[str, str]:
    return {
        "tensorflow/__init__.py": (
            f'"""SIMULATED TensorFlow {version} of a nodecert lab host."""\n'
            f"__version__ = {version!r}\n__nodecert_simulated__ = True\n"
            "from . import config, sysconfig  # noqa: E402\n"
            + _lab_worker(version, cuda, cudnn, "")),
        "tensorflow/sysconfig.py": (
            "def get_build_info():\n"
            f"    return {{'cuda_version': {cuda!r}, 'cudnn_version': {cudnn!r}, "
            "'is_cuda_build': True}\n"),
        "tensorflow/config.py": (
            _GPU_PROBE + "\n\nclass PhysicalDevice:\n"
            "    def __init__(self, name):\n        self.name, self.device_type = name, 'GPU'\n\n\n"
            "def list_physical_devices(device_type=None):\n"
            "    if device_type not in (None, 'GPU'):\n        return []\n"
            "    return [PhysicalDevice(f'/physical_device:GPU:{i}') "
            "for i, _ in enumerate(_gpus())]\n"),
    }


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def build_wheel(out: Path, dist: str, version: str, files: dict[str, str]) -> Path:
    info = f"{dist}-{version}.dist-info"
    meta = {
        f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
                             f"Summary: SIMULATED {dist} for nodecert lab hosts\n"),
        f"{info}/WHEEL": ("Wheel-Version: 1.0\nGenerator: nodecert-lab\nRoot-Is-Purelib: true\n"
                          "Tag: py3-none-any\n"),
    }
    everything = {**files, **meta}
    record = [f"{name},{_record_hash(text.encode())},{len(text.encode())}"
              for name, text in sorted(everything.items())]
    record.append(f"{info}/RECORD,,")
    path = out / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in sorted(everything.items()):
            # A fixed timestamp keeps the wheel (and its sha256) reproducible.
            zi = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            z.writestr(zi, text)
        z.writestr(zipfile.ZipInfo(f"{info}/RECORD", date_time=(2020, 1, 1, 0, 0, 0)),
                   "\n".join(record) + "\n")
    return path


def build_wheelhouse(mirror: Path) -> list[Path]:
    wheels = mirror / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    built: dict[str, Path] = {}
    for stack in list_stacks():
        fw = stack.framework
        if fw.pytorch is not None:
            t = fw.pytorch
            cudnn, nccl = TORCH_BUNDLES[t.release][t.cuda]
            built[f"torch {t}"] = build_wheel(wheels, "torch", str(t),
                                              _torch_files(str(t), t.cuda, cudnn, nccl))
        if fw.tensorflow is not None:
            cuda, cudnn = TF_BUILDS[fw.tensorflow]
            built[f"tensorflow {fw.tensorflow}"] = build_wheel(
                wheels, "tensorflow", fw.tensorflow, _tf_files(fw.tensorflow, cuda, cudnn))
    write_simple_index(mirror)  # the same index `nodecert mirror build` writes
    return sorted(built.values())


def stack_hashes(mirror: Path) -> dict[str, dict[str, list[str]]]:
    """Per stack, the sha256 of each wheel its environment installs from the lab's mirror
    ({"r580-cuda13.0": {"torch==2.9.1+cu130": ["<hex>"]}}): the lab provisions with
    --require-hashes, as a site with a locked framework does."""
    out: dict[str, dict[str, list[str]]] = {}
    for stack in list_stacks():
        fw = stack.framework
        pins = ([("torch", str(fw.pytorch))] if fw.pytorch is not None else []) + (
            [("tensorflow", fw.tensorflow)] if fw.tensorflow is not None else [])
        entry = {}
        for dist, version in pins:
            whl = mirror / "wheels" / f"{dist}-{version}-py3-none-any.whl"
            if whl.is_file():
                entry[f"{dist}=={version}"] = [hashlib.sha256(whl.read_bytes()).hexdigest()]
        if entry and len(entry) == len(pins):
            out[stack.name] = entry
    return out
