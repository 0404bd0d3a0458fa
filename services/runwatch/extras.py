"""Optional dependency groups (extras) and the one-line error when one is missing.

``pip install runwatch`` is the SDK, ``runwatch emit``, data-quality reports
and the node agent. Each service comes with an extra that installs what it
needs: ``runwatch[processor]``, ``runwatch[sink]``, ``runwatch[store]``,
``runwatch[pager]``; ``runwatch[all]`` is everything (the local stack, the
simulator, the benchmarks). A service module calls :func:`require` before its
first third-party import, and the CLI turns a :class:`MissingExtraError` (or a
plain ``ModuleNotFoundError`` of an optional package) into one line naming the
extra to install.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable

#: What each extra provides, by top-level import name (pyproject.toml lists the pins).
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "processor": ("faust", "river", "numpy", "httpx", "rich"),
    "sink": ("clickhouse_connect", "httpx", "rich"),
    "store": ("chdb", "clickhouse_connect", "lz4", "zstandard", "httpx", "rich"),
    "pager": ("httpx", "rich"),
}

#: The extra each CLI command needs; commands not listed work on the base install.
COMMAND_EXTRA: dict[str, str] = {
    "processor": "processor",
    "sink": "sink",
    "store": "store",
    "pager": "pager",
    "alerts": "pager",
    "silence": "pager",
    "db": "sink",
    "sql": "sink",
    "gate": "sink",
    "stack": "all",
    "demo": "all",
    "simulate": "all",
    "bench": "all",
}


class MissingExtraError(ModuleNotFoundError):
    """A runwatch component was used without the extra that installs its dependencies."""


def install_hint(extra: str, what: str) -> str:
    """Return the one-line message for a missing extra.

    Args:
        extra: The extra's name (``processor``, ``sink``, ...).
        what: What needs it (``runwatch processor``, ...).

    Returns:
        ``"<what> needs the '<extra>' extra: pip install 'runwatch[<extra>]'"``.

    """
    return f"{what} needs the '{extra}' extra: pip install 'runwatch[{extra}]'"


def missing(modules: Iterable[str]) -> list[str]:
    """Return the top-level modules of ``modules`` that are not installed.

    Args:
        modules: Top-level import names.

    Returns:
        Those ``importlib`` cannot find, in the given order. A module already
        imported counts as installed (faust replaces its module object with one
        whose ``__spec__`` is None, and ``find_spec`` then raises).

    """
    return [m for m in modules if m not in sys.modules and importlib.util.find_spec(m) is None]


def require(extra: str, what: str | None = None) -> None:
    """Raise one clear error when the modules of ``extra`` are not installed.

    Args:
        extra: A key of :data:`EXTRA_MODULES`.
        what: What needs them (default ``runwatch <extra>``).

    Raises:
        MissingExtraError: Some are missing (named in the message's tail).

    """
    absent = missing(EXTRA_MODULES[extra])
    if absent:
        msg = f"{install_hint(extra, what or f'runwatch {extra}')} (missing: {', '.join(absent)})"
        raise MissingExtraError(msg, name=absent[0])


def extra_for(command: str | None, module: str | None) -> str | None:
    """Return the extra that provides ``module`` for ``command``, or None if it is not optional.

    Args:
        command: The CLI command that failed (``processor``, ``stack``, ...), if any.
        module: The dotted name of the module that could not be imported.

    Returns:
        The extra to install, or None when ``module`` is not one of an extra's
        packages (a real bug, to be reported as is).

    """
    top = (module or "").split(".", 1)[0]
    providers = [extra for extra, mods in EXTRA_MODULES.items() if top in mods]
    if not providers:
        return None
    wanted = COMMAND_EXTRA.get(command or "")
    if wanted is not None and (wanted == "all" or wanted in providers):
        return wanted
    return providers[0]
