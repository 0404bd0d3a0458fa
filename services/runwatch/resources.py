"""Files runwatch reads at run time, found inside the installed package.

The repository's top-level ``schemas/`` and ``infra/`` folders are the one
source of truth people read and review. ``runwatch/_data`` maps them into the
package through symbolic links (``_data/schemas -> schemas``,
``_data/infra/clickhouse -> infra/clickhouse``, ...): an editable install reads
them in place, and a wheel build copies the files they point to (the
``package-data`` patterns in ``pyproject.toml``). Nothing here looks for a
checkout; every path comes from :func:`importlib.resources.files`.

Overrides, for deployments that keep their own copies:

* ``RUNWATCH_SCHEMA_DIR``: the Avro schema folder (``<dir>/*.avsc`` and
  ``<dir>/history/``).
* ``RUNWATCH_TOPICS_FILE``: the topic map (``topics.yaml``).
* Service settings name their own files (``RUNWATCH_STORE_USERS_FILE``,
  ``RUNWATCH_PAGER_RULES_FILE``, ``RUNWATCH_SINK_SUMMARY_SQL``,
  ``RUNWATCH_STACK_ALERTMANAGER_CONFIG``, ...).
* ``RUNWATCH_COSTS_FILE``: the prices ``runwatch cost`` and ``capacity`` read.
"""

from __future__ import annotations

import errno
import os
from importlib import resources
from pathlib import Path

SCHEMA_DIR_ENV = "RUNWATCH_SCHEMA_DIR"
TOPICS_FILE_ENV = "RUNWATCH_TOPICS_FILE"
COSTS_FILE_ENV = "RUNWATCH_COSTS_FILE"


class ResourceError(RuntimeError):
    """A packaged data file is missing (a broken install) or unreadable."""


class NotText(OSError):
    """A config file that is not UTF-8 text (an ``OSError``, caught with unreadable ones)."""


def read_config(path: Path) -> str:
    """Return a config file's text (UTF-8).

    Every config loader reads through this, so a file in another encoding (a
    Latin-1 ``Zoë``, a binary file passed by mistake) is refused like an
    unreadable one, with the file and the byte, instead of a traceback.

    Args:
        path: The file.

    Returns:
        Its text.

    Raises:
        OSError: It cannot be read (:class:`NotText`: it is not UTF-8 text; its
            ``strerror`` says where, ``filename`` is the file, as for a missing one).

    """
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        why = (f"not UTF-8 text (byte {exc.start}: 0x{exc.object[exc.start]:02x}); save the "
               "file as UTF-8")
        raise NotText(errno.EILSEQ, why, str(path)) from None


def data_root() -> Path:
    """Return the folder of runwatch's packaged data files.

    Returns:
        ``<runwatch package>/_data`` as a file-system path.

    Raises:
        ResourceError: The package is not installed as plain files (e.g. from a
            zip), so its data has no path.

    """
    root = resources.files("runwatch") / "_data"
    if not isinstance(root, Path):
        msg = f"runwatch's data files are not on the file system ({root!r}); install the wheel"
        raise ResourceError(msg)
    return root


def resource(*parts: str) -> Path:
    """Return the path of one packaged file or folder.

    Args:
        *parts: Path components under ``_data`` (e.g. ``"schemas", "topics.yaml"``).

    Returns:
        The path.

    Raises:
        ResourceError: It is not in this install.

    """
    path = data_root().joinpath(*parts)
    if not path.exists():
        msg = (f"runwatch package data {'/'.join(parts)} is missing from {data_root()} "
               "(broken install?)")
        raise ResourceError(msg)
    return path


def schemas_dir() -> Path:
    """Return the packaged copy of the repository's ``schemas/`` folder.

    Returns:
        The folder.

    """
    return resource("schemas")


def avro_schema_dir() -> Path:
    """Return the Avro schema folder: ``$RUNWATCH_SCHEMA_DIR`` or the packaged one.

    The override is returned as given, even when it does not exist: loading
    the schemas then fails with an error naming it.

    Returns:
        The folder.

    """
    env = os.environ.get(SCHEMA_DIR_ENV)
    if env:
        return Path(env)
    return data_root() / "schemas" / "avro"


def internal_formats_dir() -> Path:
    """Return the folder of the internal JSON formats (``schemas/internal/*.json``).

    Returns:
        The folder.

    """
    return resource("schemas", "internal")


def topics_file() -> Path:
    """Return the topic map: ``$RUNWATCH_TOPICS_FILE`` or the packaged ``topics.yaml``.

    Returns:
        The file.

    """
    env = os.environ.get(TOPICS_FILE_ENV)
    if env:
        return Path(env)
    return data_root() / "schemas" / "topics.yaml"


def clickhouse_ddl_dir() -> Path:
    """Return the folder of ClickHouse migrations (``NNNN_*.sql``).

    Returns:
        The folder.

    """
    return resource("schemas", "clickhouse")


def retention_file() -> Path:
    """Return the retention and downsampling rules (``retention.yaml``).

    Returns:
        The file.

    """
    return resource("schemas", "retention.yaml")


def summary_sql_file() -> Path:
    """Return the run-summary statement the sink runs when a run ends.

    Returns:
        The file.

    """
    return resource("schemas", "clickhouse", "summary", "run_summary.sql")


def users_file() -> Path:
    """Return the store's default users file (``infra/clickhouse/users.yaml``).

    Returns:
        The file.

    """
    return resource("infra", "clickhouse", "users.yaml")


def pager_routes_file() -> Path:
    """Return the pager's default routing rules (``infra/pager/routes.yaml``).

    Returns:
        The file.

    """
    return resource("infra", "pager", "routes.yaml")


def ownership_file() -> Path:
    """Return the default ownership file (``infra/pager/ownership.yaml``).

    Returns:
        The file.

    """
    return resource("infra", "pager", "ownership.yaml")


def configured_ownership_file(explicit: Path | None = None) -> Path:
    """Return the ownership file a command reads.

    ``explicit``, else the processor's (``$RUNWATCH_PROCESSOR_OWNERSHIP_FILE``), else the
    shipped one (:func:`ownership_file`).
    """
    env = os.environ.get("RUNWATCH_PROCESSOR_OWNERSHIP_FILE")
    return explicit or (Path(env) if env else ownership_file())


def costs_file() -> Path:
    """Return the prices file: ``$RUNWATCH_COSTS_FILE`` or the packaged example ``costs.yaml``.

    Returns:
        The file.

    """
    env = os.environ.get(COSTS_FILE_ENV)
    if env:
        return Path(env)
    return resource("infra", "cost", "costs.yaml")


def alertmanager_config() -> Path:
    """Return the local stack's Alertmanager configuration.

    Returns:
        The file.

    """
    return resource("infra", "alertmanager", "alertmanager.yml")


def kafka_pom() -> Path:
    """Return the Maven project that lists the local broker's jars.

    Returns:
        The file.

    """
    return resource("infra", "kafka", "pom.xml")


def kafka_log4j() -> Path:
    """Return the local broker's log4j2 configuration.

    Returns:
        The file.

    """
    return resource("infra", "kafka", "log4j2.properties")
