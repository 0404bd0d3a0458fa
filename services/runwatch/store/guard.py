"""Refuse what reaches the host or the network, from the engine's own parse of a query.

The store never matches SQL text with patterns. For every client statement it
asks the engine twice (see :func:`runwatch.store.executor.vet`):
``formatQuery`` (one statement only, and its canonical text) and
``EXPLAIN AST`` of that canonical text. This module judges the results: the
AST tree (every node, at any depth: subqueries, CTEs, ``view()``, ``IN``,
``CREATE VIEW``/``CREATE TABLE AS``, ``INSERT INTO FUNCTION``, dictionary
sources, ``PARALLEL WITH``, ``EXECUTE AS``) and, for what the AST dump leaves
out (the target of ``INTO OUTFILE``, ``SETTINGS`` of a table), the tokens of
the canonical text. Comments, case, whitespace and backquotes are gone by then.

Table functions and engines are **allowed by list** (:data:`SAFE_TABLE_FUNCTIONS`,
:data:`SAFE_ENGINES`): anything else, including ones a later chDB adds, needs a
grant. Pure: no I/O except :func:`within`, which resolves paths.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from runwatch.store.errors import StoreError
from runwatch.store.policy import Grants

SAFE_TABLE_FUNCTIONS = frozenset(
    {
        "numbers", "numbers_mt", "zeros", "zeros_mt", "values", "sqlstandardvalues",
        "generate_series", "generateseries", "generaterandom", "null", "view",
        "viewifpermitted", "viewexplain", "merge", "loop", "format", "dictionary", "primes",
        "mergetreeindex", "mergetreeprojection", "mergetreeanalyzeindexes",
        "mergetreeanalyzeindexesuuid", "mergetreetextindex", "mergetreecodecblockcounts",
        "fuzzjson", "fuzzquery",
    }
)  # fmt: skip
SAFE_ENGINES = frozenset(
    {
        "mergetree", "replacingmergetree", "summingmergetree", "aggregatingmergetree",
        "collapsingmergetree", "versionedcollapsingmergetree", "graphitemergetree",
        "coalescingmergetree", "memory", "log", "tinylog", "stripelog", "null", "set", "join",
        "buffer", "merge", "dictionary", "view", "materializedview", "generaterandom",
        "atomic", "ordinary",
    }
)  # fmt: skip
SAFE_DICTIONARY_SOURCES = frozenset({"clickhouse", "null"})
#: A ``CLICKHOUSE(...)`` dictionary source with any of these keys reaches another server.
REMOTE_SOURCE_KEYS = frozenset({"HOST", "PORT", "USER", "PASSWORD", "SECURE"})
#: Scalar functions that read the host.
HOST_FUNCTIONS = frozenset({"file"})
#: Storage settings that put a table's data at a path of the client's choosing.
PATH_STORAGE_SETTINGS = frozenset({"disk", "storage_policy", "table_disk"})
#: Statements (AST node kinds) refused unless the grant on the right is held.
STATEMENTS: dict[str, tuple[str, str]] = {
    "SYSTEM": ("system", "SYSTEM statements act on the whole store"),
    "KillQueryQuery": ("kill", "KILL stops other users' queries"),
    "BackupQuery": ("backup", "BACKUP/RESTORE read and write host paths"),
    "AttachQuery": ("attach", "ATTACH can take a table from any host path"),
    "CreateNamedCollectionQuery": ("named_collection", "named collections hold remote credentials"),
    "AlterNamedCollectionQuery": ("named_collection", "named collections hold remote credentials"),
    "DropNamedCollectionQuery": ("named_collection", "named collections hold remote credentials"),
    "ExternalDDLQuery": ("external_ddl", "it runs DDL of another server"),
    "CreateWorkloadQuery": ("workload", "workloads steer the whole store's scheduling"),
    "CreateResourceQuery": ("workload", "resources steer the whole store's scheduling"),
}
STATEMENTS.update(
    dict.fromkeys(
        ("ExecuteAsQuery", "SetRoleQuery", "GrantQuery", "CreateUserQuery", "CreateRoleQuery",
         "CreateQuotaQuery", "CreateRowPolicyQuery", "CreateSettingsProfileQuery",
         "DropAccessEntityQuery", "MoveAccessEntityQuery"),
        ("access", "the store's users, grants and profiles live in its users file"),
    )
)  # fmt: skip
#: Parents under which a ``Function`` node names a table function or an engine.
_TABLE_PARENTS = frozenset(
    {"TableExpression", "InsertQuery", "CreateQuery", "AttachQuery", "BackupQuery", "Storage"}
)
_WALK_LIMIT = 10_000  # folders a glob's directory may hold before the glob is refused
_SUFFIX_RE = re.compile(r"(?: \(alias [^()]*\))?(?: \(children \d+\))?$")
_TSV_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "0": "\0", "b": "\b", "f": "\f"}


@dataclass
class Node:
    """One node of an ``EXPLAIN AST`` dump: its kind, the rest of its label, its children."""

    kind: str
    name: str = ""
    children: list[Node] = field(default_factory=list)
    parent: Node | None = None

    def walk(self) -> Iterator[Node]:
        """Yield this node and every node under it.

        Yields:
            The nodes, depth first.

        """
        yield self
        for child in self.children:
            yield from child.walk()


def _untsv(line: str) -> str:
    return re.sub(r"\\(.)", lambda m: _TSV_ESCAPES.get(m.group(1), m.group(1)), line)


def parse_ast(dump: str) -> Node:
    """Rebuild the tree of ``EXPLAIN AST`` output (TabSeparated: one escaped line per node).

    Args:
        dump: The output, each line indented by one space per level.

    Returns:
        A synthetic root whose children are the top-level nodes.

    """
    root = Node("<root>")
    stack: list[tuple[int, Node]] = [(-1, root)]
    for raw in dump.split("\n"):
        if not raw.strip():
            continue
        depth = len(raw) - len(raw.lstrip(" "))
        label = _SUFFIX_RE.sub("", _untsv(raw.strip()))
        kind, _, name = label.partition(" ")
        if kind in ("Storage", "Columns", "Dictionary") and name.startswith(
            ("definition", "lifetime", "layout", "range")
        ):
            name = ""
        while stack[-1][0] >= depth:
            stack.pop()
        parent = stack[-1][1]
        node = Node(kind, name.strip(), parent=parent)
        parent.children.append(node)
        stack.append((depth, node))
    return root


def literal_string(node: Node) -> str | None:
    """Return the value of a string ``Literal`` node, or None for anything else.

    Args:
        node: An AST node.

    Returns:
        The unquoted string.

    """
    if node.kind != "Literal" or not node.name.startswith("'") or not node.name.endswith("'"):
        return None
    return re.sub(r"\\(.)", lambda m: _TSV_ESCAPES.get(m.group(1), m.group(1)), node.name[1:-1])


def _args(node: Node) -> list[Node]:
    for child in node.children:
        if child.kind == "ExpressionList":
            return child.children
    return []


def refuse(user: str, what: str, why: str, grant: str) -> StoreError:
    """Build the ACCESS_DENIED error for a refused use.

    Args:
        user: The user.
        what: What was refused (``table function file``).
        why: Why it is refused.
        grant: The grant that would allow it.

    Returns:
        The error (code 497, HTTP 403).

    """
    return StoreError.named(
        "ACCESS_DENIED",
        f"{user}: {what} is refused: {why}; the store allows it only to users whose "
        f"entry in the users file grants it (grants: [{grant}])",
    )


def within(path: str, directory: str) -> bool:
    """Return whether ``path`` (absolute, globs allowed) stays inside ``directory``.

    A glob is allowed only when no symbolic link under its fixed part leads
    outside the directory (the engine follows links when it expands a glob).

    Args:
        path: The path a query names.
        directory: The granted directory.

    Returns:
        True when every file the path can name lies under the directory.

    """
    if not path.startswith("/") or ".." in path or "\0" in path:
        return False
    base = os.path.realpath(directory)
    head = re.split(r"[*?{\[]", path, maxsplit=1)[0]
    fixed = head if head.endswith("/") or head == path else os.path.dirname(head)
    resolved = os.path.realpath(fixed)
    if resolved != base and not resolved.startswith(base.rstrip("/") + "/"):
        return False
    if head == path:
        return True
    for seen, (folder, dirs, names) in enumerate(os.walk(resolved)):
        if seen > _WALK_LIMIT:
            return False
        for name in (*dirs, *names):
            full = os.path.join(folder, name)
            if os.path.islink(full) and not within(os.path.realpath(full), base):
                return False
    return True


def _check_file(user: str, grants: Grants, node: Node, position: int) -> None:
    args = _args(node)
    path = literal_string(args[position]) if len(args) > position else None
    if path is None:
        if node.kind == "Function" and node.name.lower() == "file" and len(args) <= position:
            return  # ENGINE = File(format): the table's data stays in its own directory
        msg = f"{user}: the path of {node.name} must be a string literal under {grants.file_dir}"
        err = StoreError.named("ACCESS_DENIED", msg)
        raise err
    if grants.file_dir is None or not within(path, grants.file_dir):
        msg = (
            f"{user}: {node.name}({path!r}) is refused: the file grant allows only "
            f"absolute paths under {grants.file_dir}, without '..' (and globs only where no "
            "symbolic link leads outside)"
        )
        err = StoreError.named("ACCESS_DENIED", msg)
        raise err


def _check_function(user: str, grants: Grants, node: Node, dangerous: frozenset[str]) -> None:
    name = node.name.split(" ")[0]
    low = name.lower()
    parent = node.parent.kind if node.parent else ""
    if parent == "Storage":  # the engine, or an ORDER BY / PARTITION BY / TTL expression
        if low in SAFE_ENGINES:
            return
        what = f"engine {name}" if low in dangerous else ""
    elif parent in _TABLE_PARENTS:
        if low in SAFE_TABLE_FUNCTIONS:
            return
        what = f"table function {name}"
    else:
        what = f"function {name}" if low in dangerous or low in HOST_FUNCTIONS else ""
    if not what:
        return  # an ordinary function
    if not grants.allows(low):
        files = low in ("file", "filesystem", "filelog")
        why = "it reads or writes the host's files" if files else "it reaches the host or network"
        raise refuse(user, what, why, low)
    if low == "file":
        _check_file(user, grants, node, 1 if parent == "Storage" else 0)


def check_tree(user: str, grants: Grants, root: Node, dangerous: frozenset[str]) -> None:
    """Refuse a statement whose AST uses what the user is not granted.

    Args:
        user: The user, for the message.
        grants: The user's grants.
        root: The parsed ``EXPLAIN AST`` dump.
        dangerous: Lower-case names of every table function and engine the engine
            knows that are not on the safe lists (they are refused as plain
            functions too, e.g. ``x IN url(...)``).

    Raises:
        StoreError: ACCESS_DENIED naming what is refused and why.

    """
    for node in root.walk():
        if node.kind in STATEMENTS:
            grant, why = STATEMENTS[node.kind]
            if not grants.allows(grant):
                label = "SYSTEM" if node.kind == "SYSTEM" else node.kind.removesuffix("Query")
                raise refuse(user, f"statement {label}", why, grant)
        elif node.kind == "Function":
            _check_function(user, grants, node, dangerous)
        elif node.kind == "FunctionWithKeyValueArguments":
            source = node.name.strip().lower()
            if source not in SAFE_DICTIONARY_SOURCES and not grants.allows(source):
                raise refuse(user, f"dictionary source {source}", "it reaches the host or the "
                             "network", source)  # fmt: skip
        elif node.kind in ("SelectWithUnionQuery", "InsertQuery") and any(
            c.kind == "Literal" for c in node.children
        ):
            clause = "INTO OUTFILE" if node.kind == "SelectWithUnionQuery" else "FROM INFILE"
            grant = "outfile" if clause == "INTO OUTFILE" else "infile"
            if not grants.allows(grant):
                raise refuse(user, clause, "it writes or reads a host file", grant)


_TOKEN_RE = re.compile(
    r"""\s+|--[^\n]*|/\*.*?\*/|'(?:[^'\\]|\\.)*'|`(?:[^`\\]|\\.)*`|"(?:[^"\\]|\\.)*"|"""
    r"""[A-Za-z_][A-Za-z0-9_]*|\d[\w.]*|.""",
    re.DOTALL,
)


def tokens_at(text: str) -> Iterator[tuple[str, int, int]]:
    """Split SQL into tokens with their offsets, dropping whitespace and comments.

    Args:
        text: SQL text.

    Yields:
        Each token (strings and quoted names whole), its start and its end.

    """
    for match in _TOKEN_RE.finditer(text):
        tok = match.group(0)
        if not tok.isspace() and not tok.startswith(("--", "/*")):
            yield tok, match.start(), match.end()


def values_split(text: str) -> tuple[str, int] | None:
    """Split ``INSERT ... VALUES <rows>`` into its head and where the inline rows start.

    Args:
        text: A statement.

    Returns:
        The head before ``VALUES`` and the offset after it, or None when the
        statement is not an INSERT with ``VALUES`` (e.g. ``INSERT ... SELECT``).

    """
    depth = 0
    for i, (tok, start, end) in enumerate(tokens_at(text)):
        word = tok.upper()
        if i == 0 and word != "INSERT":
            return None
        depth += (tok == "(") - (tok == ")")
        if depth == 0 and word in ("SELECT", "WITH", "FORMAT", "FROM"):
            return None
        if depth == 0 and word == "VALUES":
            return text[:start], end
    return None


def check_text(user: str, grants: Grants, canonical: str) -> None:
    """Refuse what the AST dump does not show, from the tokens of the canonical text.

    Checks ``INTO OUTFILE``/``FROM INFILE``, storage settings that choose a path
    (``SETTINGS disk = disk(type = local, path = ...)``), and ``CLICKHOUSE(...)``
    dictionary sources that name another server.

    Args:
        user: The user.
        grants: The user's grants.
        canonical: The engine's ``formatQuery`` output for the statement.

    Raises:
        StoreError: ACCESS_DENIED naming what is refused and why.

    """
    toks = [tok for tok, _, _ in tokens_at(canonical)]
    upper = [t.upper() if t[:1].isalpha() or t[:1] == "_" else t for t in toks]
    for i, tok in enumerate(upper[:-1]):
        pair = (tok, upper[i + 1])
        if pair == ("INTO", "OUTFILE") and not grants.allows("outfile"):
            raise refuse(user, "INTO OUTFILE", "it writes a host file", "outfile")
        if pair == ("FROM", "INFILE") and not grants.allows("infile"):
            raise refuse(user, "FROM INFILE", "it reads a host file", "infile")
        if tok in ("SETTINGS", "SETTING") or (tok == "," and i and _in_settings(upper, i)):
            name = upper[i + 1].lower().strip("`")
            if name in PATH_STORAGE_SETTINGS and not grants.allows("disk"):
                raise refuse(user, f"setting {name}", "it places data at a host path", "disk")
        if pair == ("CLICKHOUSE", "(") and not grants.allows("remote"):
            depth = 0
            for word in upper[i + 1 :]:
                depth += (word == "(") - (word == ")")
                if depth <= 0:
                    break
                if depth == 1 and word in REMOTE_SOURCE_KEYS:
                    why = "it connects to another server"
                    raise refuse(user, f"dictionary source CLICKHOUSE({word} ...)", why, "remote")


def _in_settings(upper: list[str], i: int) -> bool:
    """Return whether the comma at ``i`` follows a SETTINGS keyword outside parentheses."""
    depth = 0
    for tok in reversed(upper[:i]):
        depth += (tok == ")") - (tok == "(")
        if depth == 0 and tok in ("SETTINGS", "SETTING"):
            return True
    return False
