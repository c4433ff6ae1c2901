"""The one-line flow mapping of a generated backends list, read without
PyYAML's constructors.

A large file lists its backends one per line::

    backends:
      - {name: c00000-r0, url: 'http://10.0.0.1:8000', models: [m00000], weight: 100}

and PyYAML built every value through its Python constructor layer: four
fifths of a 20,000-backend parse (2.5 s of CPU on a first boot, in the web
process that writes the file to the DB). ``item`` reads exactly that form
when every value is one it is sure of, and answers None for anything else,
so the caller parses that item with PyYAML as before. What it accepts, it
reads as PyYAML's safe loader does (``tests/router/test_yaml_quick.py``
checks it against PyYAML on generated items):

- keys: ``[A-Za-z_][A-Za-z0-9_]*``, never a word YAML 1.1 reads as a bool or
  null (``on``, ``yes``, ``null``…), no key twice;
- values: decimal integers without a sign, leading zero or ``_``; decimals
  ``1.5``; plain strings that start with a letter and hold only
  ``A-Za-z0-9_./@%+=-`` and ``:`` not before a space (never a bool/null word);
  single-quoted strings on one line; double-quoted ones without a backslash;
  flow lists of those (not nested);
- one line: after the ``}`` only spaces, a comment, and blank or comment lines.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["item"]

# YAML 1.1's implicit bools and nulls that start with a letter (PyYAML's resolver).
_WORDS = frozenset(
    "yes Yes YES no No NO true True TRUE false False FALSE on On ON off Off OFF null Null NULL".split()
)

_INT = r"-?(?:0|[1-9][0-9]*)"
_FLOAT = r"-?(?:0|[1-9][0-9]*)\.[0-9]+"
_PLAIN = r"[A-Za-z](?:[A-Za-z0-9_./@%+=-]|:(?=[A-Za-z0-9_./@%+=-]))*"
_SQ = r"'(?:[^'\n]|'')*'"
_DQ = r'"[^"\\\n]*"'
_SCALAR = f"(?:{_SQ}|{_DQ}|{_FLOAT}(?![^ ,\\]}}])|{_INT}(?![^ ,\\]}}])|{_PLAIN})"

_LINE = re.compile(r" *- +\{ *(?P<body>[^\n]*?) *\}(?: +#[^\n]*)? *(?:\n *(?:#[^\n]*)?)*\n?")
_PAIR = re.compile(
    rf"(?P<key>[A-Za-z_][A-Za-z0-9_]*): +(?:(?P<scalar>{_SCALAR})|\[ *(?P<list>(?:{_SCALAR}(?: *, *{_SCALAR})*)?) *\]) *(?P<end>,|$) *"
)
_SCALARS = re.compile(rf"(?P<s>{_SCALAR})(?: *, *|$)")
_IS_INT = re.compile(_INT)
_IS_FLOAT = re.compile(_FLOAT)


def _scalar(text: str) -> Any:
    first = text[0]
    if first == "'":
        return text[1:-1].replace("''", "'")
    if first == '"':
        return text[1:-1]
    if _IS_INT.fullmatch(text):
        return int(text)
    if _IS_FLOAT.fullmatch(text):
        return float(text)
    if text in _WORDS:
        raise ValueError(text)
    return text


def item(text: str) -> dict[str, Any] | None:
    """The mapping of one list item (``- {…}`` and what follows it up to the
    next item), or None when it is not in the form read here."""
    if "\t" in text or "\r" in text:
        return None
    line = _LINE.fullmatch(text)
    if line is None:
        return None
    body = line["body"]
    out: dict[str, Any] = {}
    at, n = 0, len(body)
    try:
        while at < n:
            pair = _PAIR.match(body, at)
            if pair is None:
                return None
            key = pair["key"]
            if key in _WORDS or key in out:
                return None
            if pair["scalar"] is not None:
                out[key] = _scalar(pair["scalar"])
            else:
                out[key] = [_scalar(m["s"]) for m in _SCALARS.finditer(pair["list"])]
            at = pair.end()
            if pair["end"] == "," and at >= n:
                return None  # a trailing comma
    except ValueError:
        return None
    return out
