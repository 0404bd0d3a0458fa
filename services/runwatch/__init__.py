"""runwatch: a monitor for ML training pipelines.

The SDK entry point is :func:`runwatch.init` (see ``runwatch.client``).
"""

__version__ = "0.1.0"
