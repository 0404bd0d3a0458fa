"""Run one HTTP request's statement on the engine, as ClickHouse's HTTP handler does.

``INSERT ... FORMAT X`` with the data in the body is streamed chunk by chunk
into the engine in that format (Native, Arrow, RowBinary, ...), without
buffering the body. Every other statement is read whole and run with its
output format passed straight through.
"""

from __future__ import annotations

from collections.abc import Iterator

from runwatch.store.auth import User
from runwatch.store.engine import Engine, Handle, Outcome
from runwatch.store.errors import StoreError
from runwatch.store.request import (
    RequestOptions,
    is_python_only_format,
    join_query,
    output_format,
    split_insert,
)


def execute(
    engine: Engine, user: User, opts: RequestOptions, body: Iterator[bytes], *, http_get: bool
) -> tuple[Outcome, str]:
    """Run the request's statement with the user's rights, settings and database.

    Args:
        engine: The engine.
        user: The authenticated user (its ``readonly`` level applies to every query).
        opts: The parsed request options.
        body: The decoded request body.
        http_get: Whether the request is a GET (ClickHouse runs those with readonly=2).

    Returns:
        The outcome and the output format (for ``X-ClickHouse-Format``).

    Raises:
        StoreError: With ClickHouse's code and message.

    """
    readonly = user.readonly or (2 if http_get else 0)
    if opts.session_id and not http_get:
        with (
            engine.session(
                user.name,
                opts.session_id,
                readonly=user.readonly,
                timeout_s=opts.session_timeout_s,
                check=opts.session_check,
            ) as handle,
            handle.scoped(opts.database, opts.settings),
        ):
            return _statement(handle, opts, body)
    handle = engine.open(readonly)
    try:
        if opts.database:
            handle.run(f"USE `{opts.database.replace('`', '``')}`")
        handle.apply(opts.settings)
        return _statement(handle, opts, body)
    finally:
        handle.close()


def _statement(handle: Handle, opts: RequestOptions, body: Iterator[bytes]) -> tuple[Outcome, str]:
    if opts.query:
        param = opts.query.encode("utf-8")
        split = split_insert(param)
        if split is not None and split.data_offset >= len(param):
            return handle.insert(split.statement, split.fmt, body), opts.default_format
    text = join_query(opts.query, b"".join(body))
    if not text.strip():
        err = StoreError.named("SYNTAX_ERROR", "Empty query")
        raise err
    split = split_insert(text)
    if split is not None:
        data = memoryview(text)[split.data_offset :]
        return handle.insert(split.statement, split.fmt, [bytes(data)]), opts.default_format
    fmt = output_format(text, opts.default_format)
    if is_python_only_format(fmt):
        err = StoreError.named("UNKNOWN_FORMAT", f"Unknown output format {fmt}")
        raise err
    sql = text.decode("utf-8", errors="replace")
    return handle.run(sql, fmt, opts.params), fmt
