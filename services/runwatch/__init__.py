"""runwatch: a monitor for ML training pipelines.

The SDK entry point is :func:`runwatch.init` (see ``runwatch.client``).
"""

from runwatch._version import __version__

__all__ = ["__version__", "init"]


def __getattr__(name: str) -> object:
    """Load ``runwatch.init`` lazily so importing runwatch stays cheap."""
    if name == "init":
        from runwatch.client import init

        return init
    msg = f"module 'runwatch' has no attribute {name!r}"
    raise AttributeError(msg)
