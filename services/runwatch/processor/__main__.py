"""``python -m runwatch.processor [faust worker args]`` — run one processor worker."""

from __future__ import annotations

import sys

from runwatch.adapters.settings import KafkaSettings
from runwatch.processor.app import build, ensure_internal_topics
from runwatch.processor.settings import ProcessorSettings


def main(argv: list[str] | None = None) -> None:
    """Build the app from env settings and hand the arguments to faust's worker CLI."""
    args = list(sys.argv[1:] if argv is None else argv) or ["worker", "-l", "info"]
    if args[0] == "worker" and not any(a.startswith("--with") for a in args):
        args.append("--without-web")  # no HTTP port: several workers share a host
    settings, kafka = ProcessorSettings(), KafkaSettings()
    ensure_internal_topics(settings, kafka)
    processor = build(settings, kafka)
    sys.argv = ["runwatch-processor", *args]
    processor.app.main()


if __name__ == "__main__":
    main()
