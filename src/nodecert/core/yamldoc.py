"""Strict reading of YAML data files, with errors that name file, line and field.

Manifests are written by hand; a typo must not silently become a default. Every
reader here rejects unknown keys and wrong types and says where the problem is:
``stacks/r580.yml:14: driver.version: expected a string, got 580.95 (a number);
quote it: "580.95"``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from nodecert.core.errors import ManifestError, VersionError

T = TypeVar("T")

PathKey = tuple[str | int, ...]


def _compose_lines(node: yaml.Node, key: PathKey, lines: dict[PathKey, int]) -> None:
    lines[key] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for k_node, v_node in node.value:
            if isinstance(k_node, yaml.ScalarNode):
                lines[(*key, str(k_node.value))] = k_node.start_mark.line + 1
                _compose_lines(v_node, (*key, str(k_node.value)), lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _compose_lines(item, (*key, i), lines)


def keyed(raw: Any, keys: set[str] | frozenset[str]) -> tuple[dict[str, Any] | None,
                                                                str | None]:
    """A mapping whose keys are all known: (mapping, None), or (None, what is wrong) for a
    value that is not a mapping or carries an unknown key -- the strict reading Node.mapping
    does, for values that arrive without a file position (inventory variables, read by
    Ansible from INI text or YAML)."""
    if not isinstance(raw, dict):
        return None, f"must be a mapping ({', '.join(sorted(keys))}), got {raw!r}"
    unknown = sorted(set(map(str, raw)) - set(keys))
    if unknown:
        return None, f"unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(keys))})"
    return raw, None


class UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (PyYAML keeps the last one)."""


def _construct_mapping(loader: UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for k_node, _ in node.value:
        k = loader.construct_object(k_node)
        if k in seen:
            raise ManifestError(
                f"duplicate key {k!r} (first at line {seen[k]})",
                where=f"{k_node.start_mark.name}:{k_node.start_mark.line + 1}",
                hint="remove one of the two entries",
            )
        seen[k] = k_node.start_mark.line + 1
    return loader.construct_mapping(node)


UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def load(path: Path) -> Node:
    """Parse a YAML file into a Node cursor at its root."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestError(f"cannot read file: {exc.strerror}", where=str(path)) from exc
    try:
        root_node = yaml.compose(text, Loader=UniqueKeyLoader)
        data = yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader subclass
    except ManifestError as exc:
        raise ManifestError(exc.what, where=f"{path}:{(exc.where or '').rsplit(':', 1)[-1]}",
                            hint=exc.hint) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ManifestError(f"not valid YAML: {problem}", where=where) from exc
    lines: dict[PathKey, int] = {}
    if root_node is not None:
        _compose_lines(root_node, (), lines)
    return Node(path, (), data, lines)


def _describe(value: Any) -> str:
    kind = {bool: "a boolean", int: "a number", float: "a number", list: "a list",
            dict: "a mapping", type(None): "empty"}.get(type(value), type(value).__name__)
    return f"{value!r} ({kind})"


@dataclass(frozen=True)
class Node:
    """A cursor into a parsed YAML document that knows its file, line and field path."""

    file: Path
    key: PathKey
    value: Any
    lines: dict[PathKey, int]

    @property
    def field(self) -> str:
        out = ""
        for part in self.key:
            out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
        return out or "(top level)"

    @property
    def where(self) -> str:
        line = self.lines.get(self.key)
        loc = f"{self.file}:{line}" if line else str(self.file)
        return f"{loc}: {self.field}"

    def error(self, what: str, hint: str | None = None) -> ManifestError:
        return ManifestError(what, where=self.where, hint=hint)

    def child(self, key: str | int, value: Any) -> Node:
        return Node(self.file, (*self.key, key), value, self.lines)

    def mapping(self, required: set[str], optional: set[str] = frozenset()) -> dict[str, Node]:  # type: ignore[assignment]
        if not isinstance(self.value, dict):
            raise self.error(f"expected a mapping, got {_describe(self.value)}")
        unknown = sorted(str(k) for k in self.value if k not in required | optional)
        if unknown:
            allowed = ", ".join(sorted(required | optional))
            raise self.error(f"unknown key(s): {', '.join(unknown)}",
                             hint=f"allowed keys here: {allowed}")
        missing = sorted(required - set(self.value))
        if missing:
            raise self.error(f"missing required key(s): {', '.join(missing)}")
        return {str(k): self.child(str(k), v) for k, v in self.value.items()}

    def items(self) -> Iterator[tuple[str, Node]]:
        """Entries of a free-form mapping (keys chosen by the user)."""
        if not isinstance(self.value, dict):
            raise self.error(f"expected a mapping, got {_describe(self.value)}")
        for k, v in self.value.items():
            yield str(k), self.child(str(k), v)

    def seq(self) -> list[Node]:
        if not isinstance(self.value, list):
            raise self.error(f"expected a list, got {_describe(self.value)}")
        return [self.child(i, v) for i, v in enumerate(self.value)]

    def text(self) -> str:
        if not isinstance(self.value, str):
            hint = None
            if isinstance(self.value, int | float) and not isinstance(self.value, bool):
                hint = f'quote it: "{self.value}" (YAML reads 580.10 as the number 580.1)'
            raise self.error(f"expected a string, got {_describe(self.value)}", hint=hint)
        if not self.value.strip():
            raise self.error("must not be empty")
        return self.value

    def opt_text(self) -> str | None:
        return None if self.value is None else self.text()

    def integer(self) -> int:
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            raise self.error(f"expected an integer, got {_describe(self.value)}")
        return self.value

    def boolean(self) -> bool:
        if not isinstance(self.value, bool):
            raise self.error(f"expected true or false, got {_describe(self.value)}")
        return self.value

    def choice(self, allowed: tuple[str, ...]) -> str:
        text = self.text()
        if text not in allowed:
            raise self.error(f"{text!r} is not one of: {', '.join(allowed)}")
        return text

    def text_list(self) -> list[str]:
        return [n.text() for n in self.seq()]

    def parsed(self, parser: Callable[[str], T]) -> T:
        """The string value run through a version parser; a parse error names this field."""
        try:
            return parser(self.text())
        except VersionError as exc:
            raise self.error(exc.what, hint=exc.hint) from exc

    def opt_parsed(self, parser: Callable[[str], T]) -> T | None:
        return None if self.value is None else self.parsed(parser)
