"""Where nodecert's data trees (stacks/, inventory/) live.

In a clone they sit at the repository root, next to ``src/``; a built wheel
carries a copy under ``nodecert/_data``. ``NODECERT_HOME`` overrides both so an
integrator can keep their own stacks outside the tree.
"""

from __future__ import annotations

import os
from pathlib import Path

# The nodecert package directory (this module lives one level below it, in core/).
_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def data_root() -> Path:
    env = os.environ.get("NODECERT_HOME")
    if env:
        return Path(env)
    repo_root = _PACKAGE_DIR.parent.parent
    if (repo_root / "stacks").is_dir():
        return repo_root
    return _PACKAGE_DIR / "_data"


def product_dir(name: str) -> Path:
    """The product's own roles/ or playbooks/: the clone's, else the wheel's copy. Never
    NODECERT_HOME: an integrator's data directory holds stacks, not nodecert's code."""
    repo = _PACKAGE_DIR.parent.parent / name
    return repo if repo.is_dir() else _PACKAGE_DIR / "_data" / name


def stacks_dir() -> Path:
    return data_root() / "stacks"


def compat_dir() -> Path:
    return stacks_dir() / "compat"


class Member:
    """A fixed path below an object's own directory (the path in its attribute `base`),
    declared as a class attribute: a directory layout reads as one table of names.

        class LabConfig:
            mirror = Member("root", "mirror")
    """

    def __init__(self, base: str, *parts: str) -> None:
        self.base, self.parts = base, parts

    def __get__(self, owner_object: object, owner: type | None = None) -> Path:
        return Path(getattr(owner_object, self.base)).joinpath(*self.parts)
