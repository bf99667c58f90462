"""Version strings of the NVIDIA stack: parse, validate, compare.

Three shapes appear in manifests and on nodes:

* Debian package versions ``[epoch:]upstream[-revision]``, e.g. DCGM's
  ``1:4.4.2-1`` or Ubuntu's ``580.173.02-0ubuntu0.24.04.1``. Ordered with dpkg's
  algorithm (``~`` sorts before everything, letters before other symbols, digit
  runs numerically), so our answer matches ``dpkg --compare-versions``.
* NVIDIA driver versions ``<branch>.<minor>[.<patch>]``, e.g. ``580.95.05`` or
  ``570.26``; compared numerically component by component.
* NCCL package versions ``<x.y.z>-<rev>+cuda<X.Y>[extra]``, e.g.
  ``2.21.5-1+cuda12.4``: the ``+cudaX.Y`` suffix names the CUDA build, and one
  NCCL release is published for several CUDA minors, so the suffix matters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

from nodecert.core.errors import VersionError

_UPSTREAM_RE = re.compile(r"^[0-9][A-Za-z0-9.+~-]*$")
_UPSTREAM_NO_HYPHEN_RE = re.compile(r"^[0-9][A-Za-z0-9.+~]*$")
_REVISION_RE = re.compile(r"^[A-Za-z0-9.+~]+$")


def _order(ch: str) -> int:
    """dpkg's character weight: digits 0, '~' below everything, letters before symbols."""
    if ch == "~":
        return -1
    if ch.isdigit():
        return 0
    if ch.isalpha():
        return ord(ch)
    return ord(ch) + 256


def _verrevcmp(a: str, b: str) -> int:
    """Compare two upstream or revision strings exactly as dpkg does."""
    i = j = 0
    while i < len(a) or j < len(b):
        first_diff = 0
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac = _order(a[i]) if i < len(a) else 0
            bc = _order(b[j]) if j < len(b) else 0
            if ac != bc:
                return ac - bc
            i += 1
            j += 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        while i < len(a) and a[i].isdigit() and j < len(b) and b[j].isdigit():
            if not first_diff:
                first_diff = ord(a[i]) - ord(b[j])
            i += 1
            j += 1
        if i < len(a) and a[i].isdigit():
            return 1
        if j < len(b) and b[j].isdigit():
            return -1
        if first_diff:
            return first_diff
    return 0


@total_ordering
@dataclass(frozen=True)
class DebianVersion:
    """A Debian package version; ``str()`` gives back the exact input."""

    epoch: int
    upstream: str
    revision: str | None
    has_epoch: bool = False

    @classmethod
    def parse(cls, text: str) -> DebianVersion:
        if not isinstance(text, str) or not text or text != text.strip():
            raise VersionError(f"{text!r} is not a Debian version (empty or padded with spaces)")
        epoch = 0
        has_epoch = False
        rest = text
        if ":" in text:
            epoch_text, rest = text.split(":", 1)
            if not epoch_text.isdigit():
                raise VersionError(
                    f"{text!r}: epoch {epoch_text!r} must be a non-negative integer",
                    hint="write it like 1:4.4.2-1",
                )
            epoch = int(epoch_text)
            has_epoch = True
        if "-" in rest:
            upstream, revision = rest.rsplit("-", 1)
            if not _REVISION_RE.match(revision):
                raise VersionError(f"{text!r}: revision {revision!r} has invalid characters")
            if not _UPSTREAM_RE.match(upstream):
                raise VersionError(
                    f"{text!r}: upstream part {upstream!r} must start with a digit and use "
                    "only letters, digits and . + ~ -"
                )
            return cls(epoch, upstream, revision, has_epoch)
        if not _UPSTREAM_NO_HYPHEN_RE.match(rest):
            raise VersionError(
                f"{text!r}: upstream part {rest!r} must start with a digit and use "
                "only letters, digits and . + ~"
            )
        return cls(epoch, rest, None, has_epoch)

    def __str__(self) -> str:
        text = f"{self.epoch}:" if self.has_epoch else ""
        text += self.upstream
        if self.revision is not None:
            text += f"-{self.revision}"
        return text

    def compare(self, other: DebianVersion) -> int:
        if self.epoch != other.epoch:
            return -1 if self.epoch < other.epoch else 1
        c = _verrevcmp(self.upstream, other.upstream)
        if c:
            return -1 if c < 0 else 1
        c = _verrevcmp(self.revision or "", other.revision or "")
        return (c > 0) - (c < 0)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DebianVersion):
            return NotImplemented
        return self.compare(other) == 0

    def __hash__(self) -> int:
        # Equal versions may be spelled differently (1.0 == 1.00), so hash on
        # something compare() treats as equal: the epoch alone is safe.
        return hash(self.epoch)

    def __lt__(self, other: DebianVersion) -> bool:
        return self.compare(other) < 0


_DRIVER_RE = re.compile(r"^(\d{3})\.(\d{1,3})(?:\.(\d{1,3}))?$")


@total_ordering
@dataclass(frozen=True)
class DriverVersion:
    """An NVIDIA driver version such as ``580.95.05`` or ``570.26``."""

    branch: int
    minor: int
    patch: int | None
    text: str

    @classmethod
    def parse(cls, text: str) -> DriverVersion:
        m = _DRIVER_RE.match(text) if isinstance(text, str) else None
        if not m:
            raise VersionError(
                f"{text!r} is not an NVIDIA driver version",
                hint="use <branch>.<minor>[.<patch>] with a 3-digit branch, e.g. 580.95.05",
            )
        patch = int(m.group(3)) if m.group(3) is not None else None
        return cls(int(m.group(1)), int(m.group(2)), patch, text)

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.branch, self.minor, self.patch or 0)

    def __str__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DriverVersion):
            return NotImplemented
        return self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __lt__(self, other: DriverVersion) -> bool:
        return self.key < other.key


_DOTTED_RE = re.compile(r"^\d+(?:\.\d+)*$")


@total_ordering
@dataclass(frozen=True)
class DottedVersion:
    """A purely numeric dotted version (CUDA ``13.0.2``, cuDNN ``9.12.0.46``)."""

    parts: tuple[int, ...]
    text: str

    @classmethod
    def parse(cls, text: str, *, min_parts: int = 1, what: str = "version") -> DottedVersion:
        if not isinstance(text, str) or not _DOTTED_RE.match(text):
            raise VersionError(f"{text!r} is not a dotted numeric {what} (like 12.8.1)")
        parts = tuple(int(p) for p in text.split("."))
        if len(parts) < min_parts:
            raise VersionError(f"{what} {text!r} needs at least {min_parts} numeric parts")
        return cls(parts, text)

    def prefix(self, n: int) -> tuple[int, ...]:
        """The first n parts, zero-padded (12.8 -> (12, 8); 13 -> (13, 0))."""
        return (self.parts + (0,) * n)[:n]

    @property
    def major(self) -> int:
        return self.parts[0]

    @property
    def major_minor(self) -> str:
        a, b = self.prefix(2)
        return f"{a}.{b}"

    def __str__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DottedVersion):
            return NotImplemented
        n = max(len(self.parts), len(other.parts))
        return self.prefix(n) == other.prefix(n)

    def __hash__(self) -> int:
        return hash(self.parts[:1])

    def __lt__(self, other: DottedVersion) -> bool:
        n = max(len(self.parts), len(other.parts))
        return self.prefix(n) < other.prefix(n)


_NCCL_RE = re.compile(r"^(\d+\.\d+\.\d+)-(\d+)\+cuda(\d+)\.(\d+)([A-Za-z0-9.+~]*)$")


@dataclass(frozen=True)
class NcclVersion:
    """An NCCL package version with its CUDA build: ``2.21.5-1+cuda12.4``."""

    release: DottedVersion
    revision: int
    cuda_major: int
    cuda_minor: int
    extra: str
    text: str

    @classmethod
    def parse(cls, text: str) -> NcclVersion:
        m = _NCCL_RE.match(text) if isinstance(text, str) else None
        if not m:
            raise VersionError(
                f"{text!r} is not an NCCL package version with its CUDA build",
                hint="write it as NCCL publishes it, e.g. 2.21.5-1+cuda12.4 "
                "(the +cudaX.Y suffix is required: one NCCL release exists for several CUDA "
                "minors)",
            )
        return cls(
            DottedVersion.parse(m.group(1)),
            int(m.group(2)),
            int(m.group(3)),
            int(m.group(4)),
            m.group(5),
            text,
        )

    @property
    def cuda(self) -> str:
        return f"{self.cuda_major}.{self.cuda_minor}"

    def __str__(self) -> str:
        return self.text


_TORCH_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)\+cu(\d{2,3})$")


@dataclass(frozen=True)
class TorchVersion:
    """A PyTorch wheel version with its CUDA local label: ``2.8.0+cu128``."""

    major: int
    minor: int
    patch: int
    cuda_major: int
    cuda_minor: int
    text: str

    @classmethod
    def parse(cls, text: str) -> TorchVersion:
        m = _TORCH_RE.match(text) if isinstance(text, str) else None
        if not m:
            raise VersionError(
                f"{text!r} is not a CUDA build of PyTorch",
                hint="pin the wheel with its CUDA label, e.g. 2.8.0+cu128",
            )
        label = m.group(4)
        # The label is the CUDA version without the dot: cu128 -> 12.8, cu130 -> 13.0,
        # cu118 -> 11.8. Majors are two digits for every CUDA that has wheels.
        cuda_major, cuda_minor = int(label[:2]), int(label[2:])
        return cls(int(m.group(1)), int(m.group(2)), int(m.group(3)), cuda_major, cuda_minor, text)

    @property
    def release(self) -> str:
        return f"{self.major}.{self.minor}"

    @property
    def cuda(self) -> str:
        return f"{self.cuda_major}.{self.cuda_minor}"

    def __str__(self) -> str:
        return self.text
