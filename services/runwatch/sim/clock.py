"""A virtual clock that runs ``speed`` times faster than the wall clock."""

from __future__ import annotations

import time
from collections.abc import Callable


class VirtualClock:
    """Virtual epoch milliseconds: ``start_ms + (wall - wall0) * speed``.

    Every timestamp the simulator emits comes from :meth:`now_ms`.
    """

    def __init__(self, speed: float = 1.0, start_ms: int | None = None,
                 wall: Callable[[], float] = time.time) -> None:
        """Create the clock.

        Args:
            speed: Virtual seconds per wall second (> 0).
            start_ms: Virtual time at creation (default: the wall clock now).
            wall: Wall clock in seconds (tests pass a fake).

        Raises:
            ValueError: When ``speed`` is not positive.

        """
        if speed <= 0:
            msg = f"speed must be positive, got {speed}"
            raise ValueError(msg)
        self.speed = float(speed)
        self._wall = wall
        self.wall0_ms = int(wall() * 1000)
        self.start_ms = self.wall0_ms if start_ms is None else int(start_ms)

    def now_ms(self) -> int:
        """Return the virtual time now."""
        return self.to_virtual(int(self._wall() * 1000))

    def to_virtual(self, wall_ms: int) -> int:
        """Map a wall-clock instant to virtual time."""
        return self.start_ms + int((wall_ms - self.wall0_ms) * self.speed)

    def to_wall(self, virtual_ms: int) -> int:
        """Map a virtual instant to the wall-clock instant it happens at."""
        return self.wall0_ms + int((virtual_ms - self.start_ms) / self.speed)

    def elapsed_s(self) -> float:
        """Virtual seconds since the clock started."""
        return (self.now_ms() - self.start_ms) / 1000.0

    def wall_delay_s(self, virtual_ms: int) -> float:
        """Wall seconds until the clock reaches ``virtual_ms`` (0 when passed)."""
        return max(self.to_wall(virtual_ms) / 1000.0 - self._wall(), 0.0)
