"""Resolving the Kafka broker jars with Maven (`make jars` for an installed package)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable

from runwatch.resources import kafka_pom
from runwatch.stack.settings import StackSettings


class JarsError(RuntimeError):
    """Maven is missing or could not resolve the jars (message says why)."""


def resolve_jars(settings: StackSettings, report: Callable[[str], None],
                       timeout_s: float = 900.0) -> None:
    """Fill the broker classpath folder with Maven from the packaged ``pom.xml``.

    What ``make jars`` does in a checkout, for an installed package: the pom is
    copied to a scratch folder under the state directory (Maven writes
    ``target/`` next to it; the installed package may be read-only) and
    ``mvn dependency:copy-dependencies`` copies the runtime jars into
    :attr:`StackSettings.lib`, from the user's Maven repository or Maven Central.

    Args:
        settings: The stack settings.
        report: Progress callback.
        timeout_s: Bound on the Maven run.

    Raises:
        JarsError: Maven is missing, fails, or leaves no broker jar behind.

    """
    lib = settings.lib
    mvn = shutil.which("mvn")
    if mvn is None:
        msg = (
            f"Kafka broker jars not found in {lib} and Maven (mvn) is not installed; "
            "install Maven, or point RUNWATCH_STACK_KAFKA_LIB at a folder of the jars "
            f"listed in {kafka_pom()} (in a checkout: `make jars`)"
        )
        raise JarsError(msg)
    work = settings.state / "kafka-pom"
    work.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(kafka_pom(), work / "pom.xml")
    lib.mkdir(parents=True, exist_ok=True)
    report(f"resolving the Kafka broker jars with Maven into {lib}")
    argv = [mvn, "-q", "-B", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
            "-DincludeScope=runtime", f"-DoutputDirectory={lib}"]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                                check=False)
    except subprocess.TimeoutExpired as exc:
        msg = f"Maven did not resolve the Kafka broker jars in {timeout_s:.0f}s"
        raise JarsError(msg) from exc
    if result.returncode != 0 or not any(lib.glob("kafka_2.13-*.jar")):
        msg = (f"Maven could not resolve the Kafka broker jars into {lib} "
               f"({result.returncode}): {(result.stdout + result.stderr)[-2000:]}")
        raise JarsError(msg)
