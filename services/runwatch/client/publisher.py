"""The SDK's publisher, at its public path.

:class:`Publisher` stamps, encodes and hands records to a transport;
:class:`CaptureTransport` keeps them in memory (tests, ``--offline`` runs).
They live in :mod:`runwatch.adapters.publisher`, shared by the SDK, the node
agent and ``runwatch emit``; import them from here in user code.
"""

from runwatch.adapters.publisher import (
    CaptureTransport,
    Publisher,
    Transport,
    default_topics,
    make_source,
    record_key,
)

__all__ = ["CaptureTransport", "Publisher", "Transport", "default_topics", "make_source",
           "record_key"]
