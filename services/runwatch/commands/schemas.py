"""``runwatch schemas``: list the wire schemas, check their compatibility, generate the records."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from runwatch import recordgen
from runwatch.core.codec.compat import check_schema_set
from runwatch.core.codec.schemas import SchemaLoadError, load_schema_set


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``schemas`` command group.

    Args:
        sub: The top-level sub-parsers.

    """
    parser = sub.add_parser(
        "schemas", help="Avro wire schemas: list, check compatibility, generate the records"
    )
    group = parser.add_subparsers(dest="schemas_command", metavar="SUBCOMMAND", required=True)
    for name, func, text in (
        ("check", _check, "verify FULL_TRANSITIVE compatibility of every schema version and "
                            "the internal JSON formats"),
        ("list", _list, "list records, versions and fingerprints"),
        ("generate", _generate, "write runwatch.core.records from the current schemas"),
    ):
        p = group.add_parser(name, help=text)
        p.add_argument(
            "--schema-dir",
            type=Path,
            default=None,
            help="directory of .avsc files (default $RUNWATCH_SCHEMA_DIR or schemas/avro)",
        )
        p.set_defaults(func=func)
        if name == "generate":
            p.add_argument(
                "--check",
                action="store_true",
                help="write nothing; fail naming every generated file that is stale",
            )
            p.add_argument(
                "--out",
                type=Path,
                default=None,
                help="records package folder (default: the installed runwatch/core/records)",
            )


def _check(args: argparse.Namespace) -> int:
    try:
        schemas = load_schema_set(args.schema_dir)
    except SchemaLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    violations = check_schema_set(schemas)
    for v in violations:
        print(f"INCOMPATIBLE {v}", file=sys.stderr)
    versions = sum(len(schemas.versions(n)) for n in schemas.current)
    if violations:
        print(f"{len(violations)} compatibility violation(s)", file=sys.stderr)
        return 1
    print(f"ok: {len(schemas.current)} records, {versions} versions, FULL_TRANSITIVE")
    return _check_internal()


def _check_internal() -> int:
    """Check the internal JSON formats and the topic map's references to them."""
    from runwatch.core.formats import FormatError, check_formats, load_formats
    from runwatch.core.topics import TopicMapError, load_tables, load_topics

    try:
        formats = load_formats()
        topics, tables = load_topics(), load_tables()
    except (FormatError, TopicMapError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    problems = check_formats(formats, topics, tables)
    for problem in problems:
        print(f"INTERNAL {problem}", file=sys.stderr)
    if problems:
        print(f"{len(problems)} internal format problem(s)", file=sys.stderr)
        return 1
    internal = sum(1 for t in topics.values() if t.format)
    print(f"ok: {len(formats)} internal formats ({internal} internal topics, "
          f"{len(tables)} tables), every example conforms")
    return 0


def _list(args: argparse.Namespace) -> int:
    try:
        schemas = load_schema_set(args.schema_dir)
    except SchemaLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for sv in schemas.all_versions():
        mark = "current" if sv.current else "history"
        print(f"{sv.name}\tv{sv.version}\t{mark}\t{sv.fingerprint.hex()}\t{sv.path.name}")
    return 0


def _generate(args: argparse.Namespace) -> int:
    try:
        if args.check:
            stale = recordgen.check(args.schema_dir, args.out)
        else:
            written = recordgen.write(args.schema_dir, args.out)
    except (SchemaLoadError, recordgen.GenerateError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        for path in stale:
            print(f"STALE {path}: differs from what the .avsc files generate", file=sys.stderr)
        if stale:
            print(f"{len(stale)} generated file(s) out of date with the schemas; "
                  "run `runwatch schemas generate` and commit the result", file=sys.stderr)
            return 1
        print("ok: generated records match the schemas")
        return 0
    for path in written:
        print(f"wrote {path}")
    print(f"ok: {len(written)} file(s) written" if written else "ok: already up to date")
    return 0
