"""Settings of ``runwatch store`` (env prefix ``RUNWATCH_STORE_``)."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from runwatch.resources import ResourceError, users_file
from runwatch.store.auth import User, load_users, parse_users

# The packaged users file (infra/clickhouse/users.yaml); should it be missing
# from an install, the same users are built in (runwatch/runwatch read-write,
# analyst/analyst readonly).
_RUNWATCH_SHA256 = "a06ab2e0205b26a9311056ef7f106d98703ee13ac1120101f52a76059a96ad87"
_ANALYST_SHA256 = "f44ceb062e35dfeea6ed7f8524d53bb0bff19f553e25cae7ef4850e4185ccbba"
BUILTIN_USERS = {
    "users": {
        "runwatch": {
            "password_env": "CLICKHOUSE_PASSWORD",
            "password_sha256_hex": _RUNWATCH_SHA256,
            "readonly": 0,
        },
        "analyst": {
            "password_env": "CLICKHOUSE_READONLY_PASSWORD",
            "password_sha256_hex": _ANALYST_SHA256,
            "readonly": 1,
        },
    }
}


class StoreSettings(BaseSettings):
    """Where the store listens, where its data lives, who may use it."""

    model_config = SettingsConfigDict(env_prefix="RUNWATCH_STORE_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8123, ge=0, le=65535)  # 0: any free port
    path: Path = Path(".runwatch/clickhouse")
    users_file: Path | None = None
    keep_alive_timeout_s: float = 30.0
    display_name: str | None = None

    def users(self) -> dict[str, User]:
        """Load the users: the configured file, the packaged one, or the built-in ones.

        Returns:
            Users by name.

        """
        if self.users_file is not None:
            return load_users(self.users_file)
        try:
            packaged = users_file()
        except ResourceError:
            return parse_users(BUILTIN_USERS, os.environ)
        return load_users(packaged)
