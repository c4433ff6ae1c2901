"""The config's YAML text, masked and unmasked in place: comments kept.

The API and the dashboard's editor show the config as YAML with its secrets
masked (adminapi/masking.py), and a YAML document sent back has each `***`
that stands for a current secret put back. Doing either on the parsed
document and dumping it again loses what the operator wrote around the
values: comments, key order within flow mappings, quoting, blank lines. So
both work on the text: the document is composed (PyYAML's node tree, which
knows where each scalar begins and ends in the text), and only the scalars
whose value changes are rewritten, each in its own span; every other byte is
the operator's.

Both check their result: the text edited must load as exactly the document
the masking (or unmasking) of the parsed one gives. Anything that does not
line up — an anchor shared by two places that mask differently, duplicate
keys, merge keys — falls back to dumping the document, as before: correct,
without the comments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .masking import mask, masked_value

_STR = "tag:yaml.org,2002:str"


class _Misfit(Exception):
    """The node tree and the document do not line up."""


def dump(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, default_flow_style=False)


def _compose(text: str) -> Node | None:
    return yaml.compose(text, Loader=yaml.SafeLoader)


def _scalar(value: str) -> str:
    """`value` as a one-line YAML scalar: single-quoted when it can be, else
    double-quoted (JSON's escapes are YAML's)."""
    if value.isprintable():
        return "'" + value.replace("'", "''") + "'"
    return orjson.dumps(value).decode()


def _apply(text: str, edits: dict[int, tuple[int, str]]) -> str:
    """`text` with each span start → (end, value) replaced by the value as a
    scalar; the line breaks that ended a block scalar's span are kept."""
    out, at = [], 0
    for start in sorted(edits):
        end, value = edits[start]
        if start < at:
            raise _Misfit()
        span = text[start:end]
        out.append(text[at:start])
        out.append(_scalar(value) + span[len(span.rstrip()) :])
        at = end
    out.append(text[at:])
    return "".join(out)


def _walk(node: Node, doc: Any, key: str, header: bool, visit: Callable[[ScalarNode, Any, str, bool], None]) -> None:
    """Each str scalar of the tree with the value at its place in `doc`,
    its key and whether it is a header value (as masking.mask walks)."""
    if isinstance(node, MappingNode):
        if not isinstance(doc, dict) or len(node.value) != len(doc):
            raise _Misfit()
        for k, v in node.value:
            if not isinstance(k, ScalarNode) or k.tag != _STR or k.value == "<<" or k.value not in doc:
                raise _Misfit()
            _walk(v, doc[k.value], k.value, header or k.value.lower() == "headers", visit)
    elif isinstance(node, SequenceNode):
        if not isinstance(doc, list) or len(node.value) != len(doc):
            raise _Misfit()
        for v, d in zip(node.value, doc, strict=True):
            _walk(v, d, key, header, visit)
    elif isinstance(node, ScalarNode) and node.tag == _STR:
        visit(node, doc, key, header)


def _edited(text: str, doc: Any, target: Any, change: Callable[[ScalarNode, Any, str, bool], str | None]) -> str:
    """`text` edited scalar by scalar into a text that loads as `target`, or
    `target` dumped when that cannot be done. `doc` is walked beside the text
    (a document of the text's shape) and its value at each scalar's place
    handed to `change`, which names the scalar's new value (None: unchanged)."""
    edits: dict[int, tuple[int, str]] = {}

    def visit(node: ScalarNode, value: Any, key: str, header: bool) -> None:
        new = change(node, value, key, header)
        if new is not None and new != node.value:
            edits[node.start_mark.index] = (node.end_mark.index, new)

    try:
        root = _compose(text)
        if root is None:
            raise _Misfit()
        _walk(root, doc, "", False, visit)
        result = _apply(text, edits)
        if yaml.safe_load(result) != target:
            raise _Misfit()
        return result
    except (_Misfit, yaml.YAMLError):
        return dump(target)


def masked_text(text: str) -> str:
    """The config's text with every secret masked in place (module doc)."""
    doc = yaml.safe_load(text) or {}
    if not text.strip():
        return dump(doc)
    return _edited(text, doc, mask(doc), lambda node, _value, key, header: masked_value(key, node.value, header=header))


def restored_text(text: str, restored: Any) -> str:
    """`text` (a document sent back) with the masked values that `restored`
    (the unmasking of what it loads as, of the same shape) put back, in place
    (module doc)."""

    def change(_node: ScalarNode, value: Any, _key: str, _header: bool) -> str | None:
        return value if isinstance(value, str) else None

    return _edited(text, restored, restored, change)
