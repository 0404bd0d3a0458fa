"""Settings profiles and grants of the store's users: parsed from the users file, rendered for chDB.

chDB runs every connection as one engine user, so the store brings the rest of
ClickHouse's per-user model itself, out of the engine's own pieces:

* A **profile** is a set of settings the store applies to each of the user's
  queries, plus ClickHouse **constraints** (``min``/``max``/``const``), which
  the store renders into the engine's ``users.xml`` as a settings profile and
  switches on per connection (``SET profile``). From then on the engine itself
  refuses a change beyond them, whether it comes from a URL parameter, a
  ``SET`` or a ``SETTINGS`` clause (code 452 SETTING_CONSTRAINT_VIOLATION).
  A profile also caps the user's concurrent queries and the memory of all the
  user's running queries together, which the store enforces itself.
* A **grant** lets a user use a table function, engine or statement that
  reaches the host or the network (see :mod:`runwatch.store.guard`); ``file``
  takes a directory that the user's file paths must stay inside.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

#: Settings no client may change: they steer the parser, point at files or tag the query.
CONST_SETTINGS = (
    "dialect",
    "allow_experimental_kusto_dialect",
    "allow_experimental_prql_dialect",
    "log_comment",
    "allow_introspection_functions",
    "format_schema",
    "format_schema_source",
    "format_template_resultset",
    "format_template_row",
    "output_format_schema",
    "workload",
    "result_overflow_mode",
    "timeout_overflow_mode",
    "read_overflow_mode",
)
#: Settings every client profile applies (chDB turns introspection functions on).
FORCED_SETTINGS = {"allow_introspection_functions": "0"}
#: Limits where 0 means "no limit": a constraint with only a max gets ``min: 1`` too.
ZERO_IS_UNLIMITED = frozenset(
    {
        "max_execution_time",
        "max_memory_usage",
        "max_result_rows",
        "max_result_bytes",
        "max_rows_to_read",
        "max_bytes_to_read",
        "max_threads",
        "max_bytes_before_external_group_by",
        "max_bytes_before_external_sort",
    }
)
GiB = 1 << 30
#: Built-in profiles; a ``profiles:`` entry of the same name in the users file replaces one.
BUILTIN_PROFILES: dict[str, dict[str, object]] = {
    "writer": {
        "settings": {
            "max_execution_time": 600,
            "max_memory_usage": 8 * GiB,
            "priority": 1,
        },
        "constraints": {
            "max_execution_time": {"min": 1, "max": 3600},
            "max_memory_usage": {"min": 1, "max": 16 * GiB},
        },
        "max_concurrent_queries": 64,
        "max_memory_usage_for_user": 16 * GiB,
    },
    "analyst": {
        "settings": {
            "max_execution_time": 60,
            "max_memory_usage": 2 * GiB,
            "max_result_rows": 1_000_000,
            "max_result_bytes": 256 << 20,
            "result_overflow_mode": "throw",
            "max_threads": 1,
            "priority": 10,
        },
        "constraints": {
            "max_execution_time": {"min": 1, "max": 300},
            "max_memory_usage": {"min": 1, "max": 4 * GiB},
            "max_result_rows": {"min": 1, "max": 10_000_000},
            "max_result_bytes": {"min": 1, "max": 1 * GiB},
        },
        "max_concurrent_queries": 4,
        "max_memory_usage_for_user": 4 * GiB,
    },
}
DEFAULT_PROFILE = {0: "writer", 1: "analyst", 2: "analyst"}


@dataclass(frozen=True, slots=True)
class Constraint:
    """What a client may do to one setting: keep it, or stay within min/max."""

    min: str | None = None
    max: str | None = None
    const: bool = False


@dataclass(frozen=True, slots=True)
class Profile:
    """A settings profile with its constraints and the store-enforced per-user caps."""

    name: str
    settings: dict[str, str] = field(default_factory=dict)
    constraints: dict[str, Constraint] = field(default_factory=dict)
    max_concurrent_queries: int = 0  # 0: no cap
    max_memory_usage_for_user: int = 0  # bytes; 0: no cap

    @property
    def engine_name(self) -> str:
        """The profile's name in the engine's users.xml."""
        return f"rw_{self.name}"


@dataclass(frozen=True, slots=True)
class Grants:
    """What a user may use beyond the defaults: names (lower case) and the ``file`` directory."""

    names: frozenset[str] = frozenset()
    file_dir: str | None = None

    def allows(self, name: str) -> bool:
        """Return whether the user holds the grant ``name``.

        Args:
            name: A table function, engine, dictionary source or statement class.

        Returns:
            True when granted.

        """
        return name.lower() in self.names


def _scalar(value: object, where: str) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float, str)):
        return str(value)
    msg = f"{where}: expected a number or a string, not {type(value).__name__}"
    raise ValueError(msg)


def _constraint(name: str, entry: object, where: str) -> Constraint:
    if entry == "const" or entry == "readonly":
        return Constraint(const=True)
    if not isinstance(entry, Mapping):
        msg = f"{where}.{name}: expected {{min: N, max: N}} or const"
        raise ValueError(msg)
    unknown = set(entry) - {"min", "max", "const", "readonly"}
    if unknown:
        msg = f"{where}.{name}: unknown keys {sorted(unknown)}"
        raise ValueError(msg)
    low = _scalar(entry["min"], f"{where}.{name}.min") if "min" in entry else None
    high = _scalar(entry["max"], f"{where}.{name}.max") if "max" in entry else None
    if low is None and high is not None and name in ZERO_IS_UNLIMITED:
        low = "1"  # else 0 would pass the max and mean "unlimited"
    return Constraint(low, high, bool(entry.get("const") or entry.get("readonly")))


def parse_profile(name: str, entry: object) -> Profile:
    """Build one profile from its users-file entry.

    Args:
        name: The profile name.
        entry: ``{settings: {...}, constraints: {...}, max_concurrent_queries: N,
            max_memory_usage_for_user: BYTES}``.

    Returns:
        The profile. Every setting it applies without a constraint of its own
        is const (a client cannot change it), as are :data:`CONST_SETTINGS`.

    Raises:
        ValueError: On a malformed entry.

    """
    where = f"profile {name!r}"
    if not isinstance(entry, Mapping):
        msg = f"{where}: expected a mapping"
        raise ValueError(msg)
    unknown = set(entry) - {
        "settings",
        "constraints",
        "max_concurrent_queries",
        "max_memory_usage_for_user",
    }
    if unknown:
        msg = f"{where}: unknown keys {sorted(unknown)}"
        raise ValueError(msg)
    raw_settings = entry.get("settings") or {}
    raw_constraints = entry.get("constraints") or {}
    if not isinstance(raw_settings, Mapping) or not isinstance(raw_constraints, Mapping):
        msg = f"{where}: settings and constraints must be mappings"
        raise ValueError(msg)
    settings = dict(FORCED_SETTINGS)
    settings.update({str(k): _scalar(v, f"{where}.settings.{k}") for k, v in raw_settings.items()})
    constraints = {
        str(k): _constraint(str(k), v, f"{where}.constraints") for k, v in raw_constraints.items()
    }
    for setting in (*settings, *CONST_SETTINGS):
        constraints.setdefault(setting, Constraint(const=True))
    return Profile(
        name=name,
        settings=settings,
        constraints=constraints,
        max_concurrent_queries=int(str(entry.get("max_concurrent_queries", 0))),
        max_memory_usage_for_user=int(str(entry.get("max_memory_usage_for_user", 0))),
    )


def parse_profiles(document: Mapping[str, object]) -> dict[str, Profile]:
    """Build the profiles: the built-in ones, replaced or extended by the file's ``profiles:``.

    Args:
        document: The parsed users file.

    Returns:
        Profiles by name.

    Raises:
        ValueError: On a malformed ``profiles`` section.

    """
    entries: dict[str, object] = dict(BUILTIN_PROFILES)
    extra = document.get("profiles") or {}
    if not isinstance(extra, Mapping):
        msg = "profiles must be a mapping {name: {...}}"
        raise ValueError(msg)
    entries.update({str(k): v for k, v in extra.items()})
    return {name: parse_profile(name, entry) for name, entry in entries.items()}


def parse_grants(user: str, entry: object) -> Grants:
    """Build a user's grants from ``grants: [url, {file: /dir}, system, ...]``.

    Args:
        user: The user name, for messages.
        entry: The list (or None).

    Returns:
        The grants.

    Raises:
        ValueError: On a malformed list or a ``file`` grant without an absolute directory.

    """
    if entry is None:
        return Grants()
    if not isinstance(entry, list):
        msg = f"user {user!r}: grants must be a list"
        raise ValueError(msg)
    names: set[str] = set()
    file_dir: str | None = None
    for item in entry:
        if isinstance(item, str):
            name, arg = item.strip().lower(), None
        elif isinstance(item, Mapping) and len(item) == 1:
            key, arg = next(iter(item.items()))
            name = str(key).strip().lower()
        else:
            msg = f"user {user!r}: a grant is a name or {{name: argument}}, not {item!r}"
            raise ValueError(msg)
        if name == "file":
            if not isinstance(arg, str) or not arg.startswith("/"):
                msg = f"user {user!r}: the file grant needs an absolute directory: {{file: /dir}}"
                raise ValueError(msg)
            file_dir = arg.rstrip("/") or "/"
        names.add(name)
    return Grants(frozenset(names), file_dir)


def _constraint_xml(name: str, constraint: Constraint) -> str:
    if constraint.const:
        return f"<{name}><const/></{name}>"
    parts = []
    if constraint.min is not None:
        parts.append(f"<min>{escape(constraint.min)}</min>")
    if constraint.max is not None:
        parts.append(f"<max>{escape(constraint.max)}</max>")
    return f"<{name}>{''.join(parts)}</{name}>"


def users_xml(profiles: Mapping[str, Profile], readonly_floor: Mapping[str, int]) -> str:
    """Render the engine's users.xml: the internal ``default`` user and one profile per profile.

    Args:
        profiles: The profiles, by name.
        readonly_floor: The lowest ``readonly`` level each profile's users have (0 or 1);
            the client may raise it, never lower it.

    Returns:
        The XML text.

    """
    rendered = []
    for profile in profiles.values():
        floor = readonly_floor.get(profile.name, 0)
        items = [_constraint_xml("readonly", Constraint(str(floor), "2"))]
        items += [_constraint_xml(n, c) for n, c in sorted(profile.constraints.items())]
        rendered.append(
            f"<{profile.engine_name}><constraints>{''.join(items)}</constraints>"
            f"</{profile.engine_name}>"
        )
    return (
        "<clickhouse><profiles><default/>" + "".join(rendered) + "</profiles>"
        "<users><default><no_password/><profile>default</profile><quota>default</quota>"
        "<networks><ip>::1</ip><ip>127.0.0.1</ip></networks></default></users>"
        "<quotas><default/></quotas></clickhouse>\n"
    )
