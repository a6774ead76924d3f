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
key and recurses. An alias (``*name``) reads a second time what was written once, so it
is refused except as a merge key's value (``<<: *base``, ``<<: [*a, *b]``), and not to
a node still being written (a cycle); what merges expand to is measured again once
built: nesting past ``MAX_DEPTH`` or more values than the text could spell is refused.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent
from yaml.nodes import MappingNode, ScalarNode

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
    The composer is the part of PyYAML that recurses, so the depth is counted there; it
    also refuses an alias anywhere but as a merge key's value, and one to an open node.
    """

    def __init__(self, stream):
        super().__init__(stream)
        # The containers being composed, outermost first: [a merge key's list?, anchor, how
        # deep the merges inside it chain]; and that chain's depth for each anchor written.
        self._open: list[list[Any]] = []
        self._merges: dict[str, int] = {}

    def compose_node(self, parent, index):
        if self.check_event(AliasEvent):
            self._check_alias(index)
            return super().compose_node(parent, index)
        opens = self.check_event(SequenceStartEvent, MappingStartEvent)
        if opens:
            event = self.peek_event()
            if len(self._open) >= MAX_DEPTH:
                raise ComposerError(
                    None, None, f"nested deeper than {MAX_DEPTH} levels", event.start_mark
                )
            merging = isinstance(index, ScalarNode) and index.tag == _MERGE
            self._open.append([merging and isinstance(event, SequenceStartEvent), event.anchor, 0])
        try:
            return super().compose_node(parent, index)
        finally:
            if opens:
                _, anchor, chain = self._open.pop()
                if anchor is not None:
                    self._merges[anchor] = chain
                if self._open:
                    self._open[-1][2] = max(self._open[-1][2], chain)

    def _check_alias(self, index) -> None:
        """An alias only as a merge key's value, to a node already written, merges chained at
        most ``MAX_DEPTH`` deep (PyYAML flattens them recursively)."""
        event = self.peek_event()
        merged = (isinstance(index, ScalarNode) and index.tag == _MERGE) or (
            isinstance(index, int) and bool(self._open) and self._open[-1][0]
        )
        if not merged:
            raise ComposerError(
                None,
                None,
                f"alias *{event.anchor} is not accepted here: write the value out (an alias "
                "may only be merged, as in <<: *base)",
                event.start_mark,
            )
        if any(entry[1] == event.anchor for entry in self._open):
            raise ComposerError(
                None, None, f"alias *{event.anchor} refers to itself", event.start_mark
            )
        chain = self._merges.get(event.anchor, 0) + 1
        if chain > MAX_DEPTH:
            raise ComposerError(
                None, None, f"merges chained deeper than {MAX_DEPTH} levels", event.start_mark
            )
        if self._open:
            self._open[-1][2] = max(self._open[-1][2], chain)

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
        node = loader.get_single_node()
        if node is None:
            return None
        data = loader.construct_document(node)
    finally:
        loader.dispose()
    problem = _expanded_problem(data, max(len(text), 10_000))
    if problem:
        raise ConstructorError(None, None, problem, node.start_mark)
    return data


def _expanded_problem(data: Any, most: int) -> str | None:
    """Why what the merges expanded to is refused: nested past ``MAX_DEPTH``, or more than
    ``most`` values (what an alias-free text of that length could hold). Walked with a stack."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > most:
            return f"merge keys (<<) expand it to more than {most} values"
        if isinstance(node, dict | list):
            if depth >= MAX_DEPTH:
                return f"nested deeper than {MAX_DEPTH} levels once merge keys (<<) are expanded"
            items = node.values() if isinstance(node, dict) else node
            stack.extend((item, depth + 1) for item in items)
    return None
