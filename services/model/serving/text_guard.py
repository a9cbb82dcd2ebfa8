"""Reject text that is not valid Unicode before it reaches a tokenizer.

JSON may spell a lone UTF-16 surrogate (``"\\ud800"``); Python decodes it into a ``str`` that no
tokenizer can encode, which used to surface as a 500. One ``json.dumps`` + UTF-8 encode of the
whole body checks it at C speed; only a failing body is walked, to name where the bad text is.
"""

from __future__ import annotations

import json
from typing import Any


def check_unicode(data: Any) -> None:
    """Raise ``ValueError`` naming the field and position of the first lone surrogate."""
    try:
        json.dumps(data, ensure_ascii=False, default=lambda _: None).encode("utf-8")
        return
    except UnicodeEncodeError:
        pass
    found = _find(data, "")
    where, index, char = found if found else ("body", 0, "\ud800")
    raise ValueError(
        f"{where or 'body'}: lone surrogate U+{ord(char):04X} at character {index}; "
        "text must be valid Unicode (UTF-16 surrogates must come in pairs)"
    )


def _find(value: Any, path: str) -> tuple[str, int, str] | None:
    if isinstance(value, str):
        for i, ch in enumerate(value):
            if "\ud800" <= ch <= "\udfff":
                return path, i, ch
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and (hit := _find(key, path)):
                return hit
            if hit := _find(item, f"{path}.{key}" if path else str(key)):
                return hit
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            if hit := _find(item, f"{path}[{i}]"):
                return hit
    return None
