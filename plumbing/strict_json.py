"""JSON (and YAML) that reads one way: every door that takes it reads it here.

Python's ``json`` keeps the last of two equal keys, so ``{"kind": "a", "kind": "b"}``
would mean one thing to Impri and another to a proxy, a log or a rules test that
keeps the first; and it recurses, so a body nested 10,000 levels deep raises
``RecursionError`` (a 500) instead of a parse error. ``loads`` refuses both:

1. the nesting is measured first by a linear scan over the text (strings skipped),
   so nothing deeper than ``MAX_DEPTH`` is ever handed to the recursive parser;
2. the text is then parsed with an ``object_pairs_hook`` that refuses a key seen
   twice in one object (after unescaping: ``"k"`` and ``"\\u006b"`` are the same key).

A refusal is ``Refused`` (a ``ValueError``, so a door's existing ``except ValueError``
still answers), one line naming the key or the limit. Text that is not JSON at all
raises ``json``'s own ``ValueError`` as before. ``load_yaml`` does the same for YAML
files (rules, gateways): a duplicate mapping key or nesting past ``MAX_DEPTH`` is a
``yaml.YAMLError`` with the line and column, where ``yaml.safe_load`` keeps the last
key and recurses.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import MappingStartEvent, SequenceStartEvent
from yaml.nodes import MappingNode

MAX_DEPTH = 64  # containers inside containers; docs/api.md ("JSON that reads one way")

# A JSON string (its closing quote optional: an unterminated one runs to the end).
_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_MERGE = "tag:yaml.org,2002:merge"


class Refused(ValueError):
    """The text parses, but not one way: a duplicate key, or nesting past the limit."""


class DuplicateKey(Refused):
    def __init__(self, key: str):
        self.key = key
        super().__init__(f"duplicate key {shown(key)} (a key may appear once in an object)")


class TooDeep(Refused):
    def __init__(self, limit: int):
        super().__init__(f"nested deeper than {limit} levels")


def shown(key: Any) -> str:
    """A key as a message quotes it: JSON-quoted, ASCII only (invisible characters show), cut short."""
    text = str(key)
    return json.dumps(text[:80]) + ("…" if len(text) > 80 else "")


def nesting(text: str) -> int:
    """How deep ``text``'s brackets nest, outside strings: two regex passes and a running sum."""
    brackets = _NOT_BRACKETS.sub("", _STRINGS.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def loads(data: str | bytes | bytearray, *, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` that reads one way: ``Refused`` for a duplicate key or too deep a nesting."""
    if isinstance(data, bytes | bytearray):
        data = bytes(data).decode(json.detect_encoding(data), "surrogatepass")
    if nesting(data) > max_depth:
        raise TooDeep(max_depth)
    return json.loads(data, object_pairs_hook=_unique)


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return found


class OneReadingLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a duplicate mapping key and nesting past ``MAX_DEPTH``.

    Merge keys (``<<: *base``) still merge: only keys written in the mapping itself count.
    The composer is the part of PyYAML that recurses, so the depth is counted there.
    """

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        opens = self.check_event(SequenceStartEvent, MappingStartEvent)
        if opens:
            self._depth += 1
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
        try:
            return super().compose_node(parent, index)
        finally:
            if opens:
                self._depth -= 1

    def construct_mapping(self, node, deep=False):
        if isinstance(node, MappingNode):
            seen: set = set()
            for key_node, _ in node.value:
                if key_node.tag == _MERGE:
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                except TypeError:
                    continue  # an unhashable key: SafeLoader's own error says so
                if duplicate:
                    raise ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"duplicate key {shown(key)}",
                        key_node.start_mark,
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` that reads one way (``OneReadingLoader``)."""
    loader = OneReadingLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
