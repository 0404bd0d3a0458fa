"""Alertmanager label sanitisation: every label set the pager sends is one Alertmanager takes.

Alert labels carry what producers wrote (run id, team, family, node, workload),
and Alertmanager keys alerts by their labels, so the rules are deterministic:
the same value always gives the same label.

- **Names** match ``[a-zA-Z_][a-zA-Z0-9_]*`` (Alertmanager refuses others):
  every other character becomes ``_``, and a leading digit gets a ``_`` in front.
- **Values**: control characters (U+0000..U+001F, U+007F..U+009F: newlines,
  tabs, escapes, NUL) and lone surrogates become U+FFFD; a value over
  :data:`LABEL_MAX` characters keeps its first 238, then ``…`` and the first
  16 hex digits of the SHA-256 of the whole value (255 characters: distinct
  values stay distinct). Quotes, spaces and any other text are kept as sent.

:func:`bounded` is that bound for any limit: the receivers' payloads use it for
the fields their APIs limit (PagerDuty's 255-character ``dedup_key``, Opsgenie's
512-character alias and entity, 50-character tags).
"""

from __future__ import annotations

import hashlib
import re

LABEL_MAX = 256
"""Longest label value sent (characters)."""
_DIGEST = 16  # hex digits of the SHA-256 after the "…"
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_BAD_NAME = re.compile("[^a-zA-Z0-9_]")


def label_name(name: str) -> str:
    """Return ``name`` as a valid Alertmanager label name.

    >>> label_name("team.name"), label_name("9lives"), label_name("")
    ('team_name', '_9lives', '_')
    """
    clean = _BAD_NAME.sub("_", name) or "_"
    return "_" + clean if clean[0].isdigit() else clean


def label_value(value: str) -> str:
    r"""Return ``value`` bounded and without control characters (see the module docstring).

    >>> label_value("run\n1") == "run\ufffd1"
    True
    >>> v = label_value("x" * 1000); len(v), v[237:239]
    (255, 'x…')
    """
    clean = _CONTROL.sub("\ufffd", value)
    if len(clean) <= LABEL_MAX:
        return clean
    return bounded(clean, LABEL_MAX - 1, whole=value)


def bounded(text: str, limit: int, *, whole: str | None = None) -> str:
    """Return ``text`` when it has at most ``limit`` characters, else a distinct shortening.

    The shortening keeps the first ``limit - 17`` characters, then ``…`` and the
    first 16 hex digits of the SHA-256 of ``whole`` (default ``text``): exactly
    ``limit`` characters, the same for the same text, different for different
    texts that share a prefix.

    >>> bounded("run-1:abc", 255)
    'run-1:abc'
    >>> v = bounded("r" * 300 + ":abc", 255); len(v), v[237:239]
    (255, 'r…')
    """
    if len(text) <= limit:
        return text
    source = text if whole is None else whole
    digest = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST]
    return f"{text[:max(0, limit - _DIGEST - 1)]}…{digest}"


def label_set(labels: dict[str, str]) -> dict[str, str]:
    """Return a label set with every name and value sanitised (later names win on a clash)."""
    return {label_name(k): label_value(v) for k, v in labels.items()}
