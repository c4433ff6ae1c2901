"""Secrets of the config document, masked for every answer, and put back
when a masked document comes back in a write.

A value is a secret when its key names one (api_key, api_secret, jwt_secret,
password, token, authorization, cookie…) or it is a header value; a URL shows
no userinfo. A plain `${VAR}` reference is not a secret (the value is in the
environment, not the file) and stays visible. Pure: no Django, no I/O.

`unmask(new, current)` is the inverse for writes: a value in `new` that is
exactly the masked form of the value at the same place in `current` is the
current value again, so GET → edit → PUT never writes `***` over a secret.
Backends are matched by name, other list items by position.
"""

from __future__ import annotations

import re
from typing import Any

from router.core.backend import masked_url

MASK = "***"
_SECRET_KEY = re.compile(r"secret|passw|token|api_?key|authoriz|cookie|credential|private", re.IGNORECASE)
_TEMPLATE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")


def masked_value(key: str, value: Any, *, header: bool = False) -> Any:
    if not isinstance(value, str) or not value:
        return value
    if _TEMPLATE.fullmatch(value):
        return value
    if header or _SECRET_KEY.search(key):
        return MASK
    if "://" in value:
        return masked_url(value)
    return value


def mask(doc: Any, key: str = "", *, header: bool = False) -> Any:
    """A copy of `doc` with every secret masked."""
    if isinstance(doc, dict):
        return {k: mask(v, str(k), header=header or str(k).lower() == "headers") for k, v in doc.items()}
    if isinstance(doc, list):
        return [mask(v, key, header=header) for v in doc]
    return masked_value(key, doc, header=header)


def _counterpart(items: list[Any], index: int, item: Any) -> Any:
    if isinstance(item, dict) and "name" in item:
        for cur in items:
            if isinstance(cur, dict) and cur.get("name") == item["name"]:
                return cur
        return None
    return items[index] if index < len(items) else None


def unmask(new: Any, current: Any, key: str = "", *, header: bool = False) -> Any:
    """`new` with each masked value that stands for the value at the same
    place in `current` replaced by that value."""
    if isinstance(new, dict):
        cur = current if isinstance(current, dict) else {}
        return {
            k: unmask(v, cur.get(k), str(k), header=header or str(k).lower() == "headers") for k, v in new.items()
        }
    if isinstance(new, list):
        cur_list = current if isinstance(current, list) else []
        return [unmask(v, _counterpart(cur_list, i, v), key, header=header) for i, v in enumerate(new)]
    if isinstance(new, str) and isinstance(current, str) and new != current:
        if new == masked_value(key, current, header=header):
            return current
    return new


def still_masked(doc: Any, path: str = "") -> list[str]:
    """Paths of values still `***` (a masked secret with no current value to stand for)."""
    if isinstance(doc, dict):
        return [p for k, v in doc.items() for p in still_masked(v, f"{path}.{k}" if path else str(k))]
    if isinstance(doc, list):
        return [p for i, v in enumerate(doc) for p in still_masked(v, f"{path}[{i}]")]
    return [path or "<root>"] if doc == MASK else []
