"""The clock rule both suites check: times a backend reports are wall-clock seconds since the epoch.

Retention compares save times with ``time.time()``, and listings print them as dates, so a
value in milliseconds or from a monotonic clock (which counts from boot) breaks them silently.
"""

from __future__ import annotations

__all__ = ["CLOCK_SLACK", "assert_wall_clock"]

CLOCK_SLACK = 5.0
"""Seconds a reported time may lie outside the moments around its write: coarse file
timestamps, a database server's clock a little off this host's. A time in milliseconds is off
by a factor of 1,000, and one from a monotonic clock by about the epoch (55 years)."""


def assert_wall_clock(value: float, before: float, after: float, what: str) -> None:
    """Fail unless ``value`` is a wall-clock time between ``before`` and ``after`` (``time.time()``
    around the write), within :data:`CLOCK_SLACK`; the message names the rule and what was seen."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise AssertionError(f"{what} must be a float of seconds since the epoch, got {value!r}")
    if before - CLOCK_SLACK <= value <= after + CLOCK_SLACK:
        return
    if before * 500 <= value <= after * 2000:
        hint = "it looks like milliseconds"
    elif value < before / 2:
        hint = "it looks like a monotonic clock (seconds since boot) or a counter"
    else:
        hint = "it is not the time of the write"
    raise AssertionError(
        f"{what} is {value!r}, but the write happened between {before:.3f} and {after:.3f} "
        f"(time.time()): the contract wants wall-clock seconds since the Unix epoch; {hint}"
    )
