"""Users of the store and ClickHouse-style HTTP authentication.

Credentials are taken the way ClickHouse's HTTP interface takes them: HTTP
Basic auth, the ``X-ClickHouse-User``/``X-ClickHouse-Key`` headers, or the
``user``/``password`` URL parameters; none at all means user ``default`` with an
empty password. Pure except :func:`load_users`, which reads the users file.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from runwatch.store.errors import StoreError
from runwatch.store.policy import (
    BUILTIN_PROFILES,
    DEFAULT_PROFILE,
    Grants,
    Profile,
    parse_grants,
    parse_profile,
    parse_profiles,
)

_WRITER = BUILTIN_PROFILES["writer"]


@dataclass(frozen=True, slots=True)
class User:
    """A store user: its name, sha256 of its password, readonly level, profile and grants."""

    name: str
    password_sha256: str
    readonly: int = 0
    profile: Profile = field(default_factory=lambda: parse_profile("writer", _WRITER))
    grants: Grants = field(default_factory=Grants)

    def check(self, password: str) -> bool:
        """Return whether ``password`` is this user's password (constant time).

        Args:
            password: The password offered.

        Returns:
            True when it matches.

        """
        offered = hashlib.sha256(password.encode("utf-8")).hexdigest()
        return hmac.compare_digest(offered, self.password_sha256)


@dataclass(frozen=True, slots=True)
class Credentials:
    """A user name and password as offered by a request."""

    user: str
    password: str


def _user_from_entry(
    name: str, entry: Mapping[str, object], env: Mapping[str, str], profiles: Mapping[str, Profile]
) -> User:
    env_name = entry.get("password_env")
    digest: str | None = None
    if isinstance(env_name, str) and env_name in env:
        digest = hashlib.sha256(env[env_name].encode("utf-8")).hexdigest()
    elif isinstance(entry.get("password_sha256_hex"), str):
        digest = str(entry["password_sha256_hex"]).strip().lower()
    elif "password" in entry:
        digest = hashlib.sha256(str(entry["password"] or "").encode("utf-8")).hexdigest()
    if digest is None or len(digest) != 64:  # noqa: PLR2004
        msg = (
            f"user {name!r}: give password, password_sha256_hex (64 hex digits) "
            "or password_env naming a set variable"
        )
        raise ValueError(msg)
    readonly = int(str(entry.get("readonly", 0)))
    if readonly not in (0, 1, 2):
        msg = f"user {name!r}: readonly must be 0, 1 or 2, not {readonly}"
        raise ValueError(msg)
    profile_name = str(entry.get("profile") or DEFAULT_PROFILE[readonly])
    if profile_name not in profiles:
        msg = f"user {name!r}: unknown profile {profile_name!r} (known: {sorted(profiles)})"
        raise ValueError(msg)
    return User(
        name=name,
        password_sha256=digest,
        readonly=readonly,
        profile=profiles[profile_name],
        grants=parse_grants(name, entry.get("grants")),
    )


def parse_users(document: object, env: Mapping[str, str]) -> dict[str, User]:
    """Build the user table from a parsed users document.

    Args:
        document: The parsed YAML: ``{"users": {name: {password...: ..., readonly: 0|1,
            profile: NAME, grants: [...]}}, "profiles": {NAME: {...}}}``.
        env: Environment variables, for ``password_env`` entries.

    Returns:
        Users by name.

    Raises:
        ValueError: When the document is malformed.

    """
    if not isinstance(document, Mapping) or not isinstance(document.get("users"), Mapping):
        msg = "users file must hold a mapping 'users: {name: {...}}'"
        raise ValueError(msg)
    profiles = parse_profiles(document)
    users: dict[str, User] = {}
    for name, entry in document["users"].items():
        if not isinstance(entry, Mapping):
            msg = f"user {name!r}: expected a mapping"
            raise ValueError(msg)
        users[str(name)] = _user_from_entry(str(name), entry, env, profiles)
    return users


def load_users(path: Path, env: Mapping[str, str] | None = None) -> dict[str, User]:
    """Read the users file.

    Args:
        path: The YAML users file.
        env: Environment for ``password_env`` (defaults to ``os.environ``).

    Returns:
        Users by name.

    """
    with path.open(encoding="utf-8") as handle:
        document = yaml.safe_load(handle)
    return parse_users(document, os.environ if env is None else env)


def credentials_from_request(headers: Mapping[str, str], params: Mapping[str, str]) -> Credentials:
    """Extract the credentials a request offers, as ClickHouse does.

    Args:
        headers: Request headers, names lower-cased.
        params: URL parameters.

    Returns:
        The credentials; ``default`` with an empty password when none are given.

    Raises:
        StoreError: On malformed Basic auth or credentials given two ways at once.

    """
    offered: list[Credentials] = []
    auth = headers.get("authorization")
    if auth:
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "basic":
            err = StoreError.named("AUTHENTICATION_FAILED", f"Unsupported authentication: {scheme}")
            raise err
        try:
            decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as exc:
            err = StoreError.named("BAD_ARGUMENTS", "Malformed Basic authorization")
            raise err from exc
        user, _, password = decoded.partition(":")
        offered.append(Credentials(user, password))
    if headers.get("x-clickhouse-user") is not None:
        offered.append(
            Credentials(headers.get("x-clickhouse-user", ""), headers.get("x-clickhouse-key", ""))
        )
    if "user" in params or "password" in params:
        offered.append(Credentials(params.get("user", "default"), params.get("password", "")))
    if len(offered) > 1:
        err = StoreError.named(
            "AUTHENTICATION_FAILED",
            "Invalid authentication: it is not allowed to use several authentication methods "
            "simultaneously",
        )
        raise err
    return offered[0] if offered else Credentials("default", "")


def authenticate(users: Mapping[str, User], credentials: Credentials) -> User:
    """Return the user the credentials identify, or refuse like ClickHouse.

    Args:
        users: The configured users.
        credentials: What the request offered.

    Returns:
        The authenticated user.

    Raises:
        StoreError: ``AUTHENTICATION_FAILED`` (516) for an unknown user or a wrong password.

    """
    user = users.get(credentials.user)
    if user is None or not user.check(credentials.password):
        err = StoreError.named(
            "AUTHENTICATION_FAILED",
            f"{credentials.user}: Authentication failed: password is incorrect, "
            "or there is no user with such name",
        )
        raise err
    return user
