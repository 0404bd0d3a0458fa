"""Run one HTTP request's statement on the engine, as ClickHouse's HTTP handler does.

``INSERT ... FORMAT X`` (or ``VALUES``) with the data in the body or inline is
streamed into the engine in that format (Native, Arrow, RowBinary, ...) from a
spill file, never parsed as SQL. Every other statement is read whole and run
with its output format passed straight through.

Before anything runs, :func:`vet` has the engine parse the statement and
:mod:`runwatch.store.guard` judge it; the engine then runs the canonical text
it checked (one statement, comments gone), never the client's raw text.
Each client connection carries its user's profile (settings, constraints) and a
tag by which :mod:`runwatch.store.limits` can cancel its query.
"""

from __future__ import annotations

import socket
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from runwatch.store.auth import User
from runwatch.store.engine import Engine, Handle, Outcome
from runwatch.store.errors import CODES, StoreError
from runwatch.store.guard import check_text, check_tree, parse_ast, tokens_at, values_split
from runwatch.store.limits import Limits, Running, new_tag
from runwatch.store.request import (
    RequestOptions,
    is_python_only_format,
    join_query,
    output_format,
    split_insert,
)

_CACHE_SIZE = 4096
_cache: OrderedDict[tuple[str, str], str] = OrderedDict()
_cache_lock = threading.Lock()


def _escaped(text: str) -> str:
    """Escape text for a ``{q:String}`` query parameter (parsed in the TSV escaped format)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")


def vet(
    handle: Handle,
    user: User,
    dangerous: frozenset[str],
    statement: str,
    params: Mapping[str, str] | None = None,
) -> str:
    """Have the engine parse one statement, refuse what the user may not do, return its text.

    Args:
        handle: The client's handle (its parser settings apply).
        user: The user, with its grants.
        dangerous: The engine's table functions and engines that are not on the safe lists.
        statement: The statement (for an INSERT with data, only its head and FORMAT).
        params: Values of its ``{name:Type}`` placeholders. Verdicts are cached per
            user and text, except with params or for a user with a file grant.

    Returns:
        The engine's ``formatQuery`` text of the statement, which is what runs.

    Raises:
        StoreError: SYNTAX_ERROR for several statements; ACCESS_DENIED for a refused use.

    """
    key = (user.name, statement)
    cacheable = not params and user.grants.file_dir is None  # paths are checked on disk
    with _cache_lock:
        if key in _cache and cacheable:
            _cache.move_to_end(key)
            return _cache[key]
    canonical = handle.value("SELECT formatQuery({q:String})", {"q": _escaped(statement)})
    dump = bytes(handle.run(f"EXPLAIN AST {canonical}", "TabSeparated", params).data).decode()
    check_tree(user.name, user.grants, parse_ast(dump), dangerous)
    check_text(user.name, user.grants, canonical)
    if cacheable:
        with _cache_lock:
            _cache[key] = canonical
            if len(_cache) > _CACHE_SIZE:
                _cache.popitem(last=False)
    return canonical


@dataclass(frozen=True, slots=True)
class Call:
    """One request's context: who asks, how, and where to count its query."""

    engine: Engine
    limits: Limits
    user: User
    opts: RequestOptions
    http_get: bool
    sock: socket.socket | None = None


def _readonly_settings(user: User, settings: Mapping[str, str]) -> None:
    """Refuse URL settings a readonly user may not change (only constrained ones, within limits)."""
    for name in settings:
        constraint = user.profile.constraints.get(name)
        if constraint is None or constraint.const:
            err = StoreError.named(
                "READONLY",
                f"{user.name}: Cannot modify '{name}' setting in readonly mode (profile "
                f"{user.profile.name} lets a readonly user change only settings with a "
                "min/max constraint, within it)",
            )
            raise err


def open_handle(engine: Engine, user: User, readonly: int, settings: Mapping[str, str]) -> Handle:
    """Open a client handle: profile, URL settings (checked by the engine's constraints), readonly.

    Args:
        engine: The engine.
        user: The user.
        readonly: The readonly level for this handle.
        settings: URL settings.

    Returns:
        The handle.

    """
    if user.readonly:
        _readonly_settings(user, settings)
    handle = engine.open_client(user.profile, new_tag())
    try:
        handle.apply(settings)
        if readonly:
            handle.apply({"readonly": str(readonly)})
    except BaseException:
        handle.close()
        raise
    return handle


def execute(call: Call, body: Iterator[bytes]) -> tuple[Outcome, str]:
    """Run the request's statement with the user's rights, profile, settings and database.

    Args:
        call: The request's context.
        body: The decoded request body.

    Returns:
        The outcome and the output format (for ``X-ClickHouse-Format``).

    Raises:
        StoreError: With ClickHouse's code and message.

    """
    engine, user, opts = call.engine, call.user, call.opts
    readonly = user.readonly or (2 if call.http_get else 0)
    if opts.session_id and not call.http_get:
        with (
            engine.session(
                user.name,
                opts.session_id,
                opener=lambda: open_handle(engine, user, user.readonly, {}),
                timeout_s=opts.session_timeout_s,
                check=opts.session_check,
            ) as handle,
            handle.scoped(opts.database, opts.settings),
        ):
            return _counted(call, handle, body)
    handle = open_handle(engine, user, readonly, opts.settings)
    try:
        if opts.database:
            handle.run(f"USE `{opts.database.replace('`', '``')}`")
        return _counted(call, handle, body)
    finally:
        handle.close()


def _counted(call: Call, handle: Handle, body: Iterator[bytes]) -> tuple[Outcome, str]:
    profile = call.user.profile
    with call.limits.admit(
        call.user.name,
        handle.tag,
        max_concurrent=profile.max_concurrent_queries,
        max_memory_for_user=profile.max_memory_usage_for_user,
        sock=call.sock,
    ) as running:
        try:
            return _run(call, handle, body, running)
        except StoreError as err:
            if err.code == CODES["QUERY_WAS_CANCELLED"] and running.reason is not None:
                raise running.reason from None
            raise


def _insert_head(handle: Handle, call: Call, statement: str, fmt: str) -> str:
    canonical = vet(handle, call.user, call.engine.dangerous, f"{statement} FORMAT {fmt}")
    toks = list(tokens_at(canonical))
    if len(toks) < 2 or toks[-2][0].upper() != "FORMAT":  # noqa: PLR2004
        err = StoreError.named("SYNTAX_ERROR", "An INSERT with data must end with FORMAT <name>")
        raise err
    return canonical[: toks[-2][1]].rstrip()


def _insert(running: Running, handle: Handle, head: str, fmt: str,
            body: Iterator[bytes] | list[bytes]) -> Outcome:
    """Run an insert to its end, whatever its client does meanwhile.

    A client disconnect cancels queries, not inserts: cancelling an insert
    midway can leave a table and its materialized views apart (the sink's
    high-water marks would then miss rows it stored, and store them twice).
    """
    running.sock = None
    return handle.insert(head, fmt, body)


def _run(call: Call, handle: Handle, body: Iterator[bytes],
         running: Running) -> tuple[Outcome, str]:
    opts = call.opts
    if opts.query:
        param = opts.query.encode("utf-8")
        split = split_insert(param)
        if split is not None and split.data_offset >= len(param):
            head = _insert_head(handle, call, split.statement, split.fmt)
            return _insert(running, handle, head, split.fmt, body), opts.default_format
    text = join_query(opts.query, b"".join(body))
    if not text.strip():
        err = StoreError.named("SYNTAX_ERROR", "Empty query")
        raise err
    split = split_insert(text)
    if split is not None:
        head = _insert_head(handle, call, split.statement, split.fmt)
        data = memoryview(text)[split.data_offset :]
        return _insert(running, handle, head, split.fmt, [bytes(data)]), opts.default_format
    sql = text.decode("utf-8", errors="replace")
    values = values_split(sql)
    if values is not None:
        head = _insert_head(handle, call, values[0].strip(), "Values")
        values_data = [sql[values[1] :].encode()]
        return _insert(running, handle, head, "Values", values_data), opts.default_format
    fmt = output_format(text, opts.default_format)
    if is_python_only_format(fmt):
        err = StoreError.named("UNKNOWN_FORMAT", f"Unknown output format {fmt}")
        raise err
    canonical = vet(handle, call.user, call.engine.dangerous, sql, opts.params)
    return handle.run(canonical, fmt, opts.params), fmt
