"""adapters.clickhouse.command classifies clickhouse-connect's errors like insert_rows."""

from __future__ import annotations

import pytest
from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError

from runwatch.adapters import clickhouse as ch


class Client:
    """Raises what the real client raises when the server goes away mid-statement."""

    def __init__(self, exc: BaseException | None) -> None:
        self.exc = exc
        self.calls: list[tuple[str, object]] = []

    def command(self, sql: str, parameters: object = None) -> object:
        self.calls.append((sql, parameters))
        if self.exc is not None:
            raise self.exc
        return "ok"


@pytest.mark.parametrize(
    ("exc", "want"),
    [
        (OperationalError("Error ('Connection aborted.', ConnectionResetError(104, "
                          "'Connection reset by peer')) executing HTTP request"),
         ch.ClickHouseUnavailable),
        (ConnectionResetError(104, "Connection reset by peer"), ch.ClickHouseUnavailable),
        (DatabaseError("Code: 159. DB::Exception: Timeout exceeded"), ch.ClickHouseUnavailable),
        (DatabaseError("Code: 62. DB::Exception: Syntax error"), ch.ClickHouseRejected),
    ],
)
def test_command_errors_are_classified(exc: BaseException, want: type) -> None:
    with pytest.raises(want):
        ch.command(Client(exc), "INSERT INTO t SELECT 1", {"runs": ["r"]})  # type: ignore[arg-type]


def test_command_passes_parameters_and_returns_the_result() -> None:
    client = Client(None)
    assert ch.command(client, "SELECT {x:UInt8}", {"x": 1}) == "ok"  # type: ignore[arg-type]
    assert client.calls == [("SELECT {x:UInt8}", {"x": 1})]
