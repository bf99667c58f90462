"""Where the validators' data files live, and how their sources are cited."""

from __future__ import annotations

from pathlib import Path

from nodecert.core import yamldoc
from nodecert.core.paths import data_root


def validators_dir() -> Path:
    return data_root() / "validators"


def render_source(key: str, node: yamldoc.Node) -> str:
    """A data file's source as one line: 'Title <URL>' or 'nodecert policy: rationale'."""
    f = node.mapping(set(), {"title", "url", "policy"})
    if "policy" in f and not ({"title", "url"} & set(f)):
        return f"nodecert policy: {f['policy'].text()}"
    if {"title", "url"} <= set(f) and "policy" not in f:
        url = f["url"].text()
        if not url.startswith("https://"):
            raise f["url"].error(f"source {key}: url must be a public https:// address")
        return f"{f['title'].text()} <{url}>"
    raise node.error(f"source {key} must be {{title, url}} (a public source) or "
                     "{policy} (nodecert policy with a one-line rationale)")


__all__ = ["render_source", "validators_dir"]
