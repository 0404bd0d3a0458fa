"""Generate the record dataclasses of :mod:`runwatch.core.records` from the Avro schemas.

``runwatch schemas generate`` reads the current version of every record
(``schemas/avro/<Name>.avsc``; ``history/`` is not read) and writes the
modules of ``services/runwatch/core/records/``: one frozen, slotted,
keyword-only dataclass per Avro record with ``AVRO_NAME``, ``to_dict`` and
``from_dict``, a ``Literal`` alias per enum, docstrings from the schemas'
``doc`` fields, and the package ``__init__`` with its registries.
``--check`` writes nothing and fails naming every file that differs (``make
lint`` runs it).

What is not in the schemas is declared in :mod:`runwatch.recordgen.layout`:
which module holds which top-level record (:data:`MODULES`) and each module's
one-line docstring. A named type used from two modules goes to ``common``; any
other nested type goes to the module of the record that uses it, before it
(dependency order). The output depends only on the schemas and the generator:
same input, same bytes. :mod:`~runwatch.recordgen.shapes` walks the schemas
and maps types; :mod:`~runwatch.recordgen.emit` writes the text.

Supported Avro shapes: primitives, ``["null", T]`` unions, arrays, maps of
primitives, nested records and enums; anything else is a
:class:`GenerateError` rather than a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from runwatch.core.codec.schemas import load_schema_set
from runwatch.recordgen.emit import init_text, module_text
from runwatch.recordgen.layout import MODULES
from runwatch.recordgen.shapes import GenerateError, collect, place

__all__ = ["MODULES", "GenerateError", "check", "default_out_dir", "render", "write"]


def render(schemas: Mapping[str, dict[str, Any]]) -> dict[str, str]:
    """Return the generated modules for a set of current schemas.

    Args:
        schemas: ``.avsc`` file name -> the schema as JSON, one per top-level record.

    Returns:
        File name inside the records package (``alerts.py``, ``__init__.py``...) -> text.

    Raises:
        GenerateError: A shape the generator does not support, or a record no
            module in :data:`MODULES` holds.

    """
    found, walks = collect(schemas)
    placed = place(found, walks)
    home = {n: mod for mod, names in placed.items() for n in names}
    out = {f"{mod}.py": module_text(mod, names, found, home) for mod, names in placed.items()}
    out["__init__.py"] = init_text(placed, found)
    return dict(sorted(out.items()))


def default_out_dir() -> Path:
    """Return the folder of the records package (where the generated modules live).

    Raises:
        GenerateError: The package is not installed as plain files.

    """
    root = resources.files("runwatch.core.records")
    if not isinstance(root, Path):
        msg = f"runwatch.core.records is not on the file system ({root!r})"
        raise GenerateError(msg)
    return root


def _rendered(schema_dir: Path | None) -> dict[str, str]:
    schemas = load_schema_set(schema_dir)
    return render({sv.path.name: sv.schema for sv in schemas.current.values()})


def check(schema_dir: Path | None = None, out_dir: Path | None = None) -> list[Path]:
    """Return the generated files that are missing or differ from what the schemas produce.

    Args:
        schema_dir: The Avro schema folder (default: the packaged ``schemas/avro``).
        out_dir: The records package folder (default: :func:`default_out_dir`).

    Returns:
        The stale files (empty when everything is up to date).

    """
    out = out_dir or default_out_dir()
    stale = []
    for name, text in _rendered(schema_dir).items():
        path = out / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(path)
    return stale


def write(schema_dir: Path | None = None, out_dir: Path | None = None) -> list[Path]:
    """Write the generated modules, only those whose text changes.

    Args:
        schema_dir: The Avro schema folder (default: the packaged ``schemas/avro``).
        out_dir: The records package folder (default: :func:`default_out_dir`).

    Returns:
        The files written.

    """
    out = out_dir or default_out_dir()
    written = []
    for name, text in _rendered(schema_dir).items():
        path = out / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written
