"""The store's disconnect check works on descriptors above select's FD_SETSIZE (1024)."""

from __future__ import annotations

import resource
import socket

import pytest

from runwatch.store.limits import peer_closed


def test_peer_closed_on_a_high_descriptor() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.fail(f"the test needs 1200 descriptors; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    filler = [socket.socket() for _ in range(1050)]
    a, b = socket.socketpair()
    try:
        assert a.fileno() > 1024
        assert peer_closed(a) is False  # a live client is not "disconnected"
        b.close()
        assert peer_closed(a) is True
    finally:
        a.close()
        for s in filler:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
