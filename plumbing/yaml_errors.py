"""One way to tell a person where their YAML file is broken (rules files, gateway files).

PyYAML's own message spans several lines with the offending line indented and a
caret under it; squashed onto one line the caret points nowhere. This says the
line and column first, then the line itself and a caret under the column::

    line 3, column 12: not YAML: mapping values are not allowed here
        when: x: y
                 ^

Callers put the file name in front (``rules.yaml: line 3, column 12: ...``).
"""

from __future__ import annotations

import yaml


def describe(exc: yaml.YAMLError, text: str) -> str:
    """``line L, column C: not YAML: problem`` and the offending line with a caret, from ``exc``."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or str(exc)
    context = getattr(exc, "context", None)
    if context and context != problem:
        problem = f"{problem} ({context}"
        context_mark = getattr(exc, "context_mark", None)
        if context_mark is not None and context_mark is not mark:
            problem += f" from line {context_mark.line + 1}, column {context_mark.column + 1}"
        problem += ")"
    if mark is None:
        return f"not YAML: {' '.join(str(exc).split())}"
    lines = text.splitlines()
    where = f"line {mark.line + 1}, column {mark.column + 1}: not YAML: {problem}"
    shown = mark
    if mark.line >= len(lines):  # at the end of the file: show where the open part began
        where += " (at the end of the file)"
        shown = getattr(exc, "context_mark", None)
        if shown is None or shown.line >= len(lines):
            return where
    offending = lines[shown.line].expandtabs(1)
    return f"{where}\n    {offending}\n    {' ' * shown.column}^"
