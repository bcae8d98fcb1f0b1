"""Fixtures and the end-of-run summary of the reliability suite."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import reliability_support as rs


@pytest.fixture
def fork_server() -> Iterator[rs.ForkServer]:
    server = rs.ForkServer()
    try:
        yield server
    finally:
        server.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    counts = rs.COUNTS
    if not counts:
        return
    terminalreporter.section("local-ai-memory reliability")
    order = [
        ("kills", "SIGKILLs of writer processes"),
        ("sigterms", "SIGTERMs of checkpointed runs"),
        ("orphans_seen", "temp files seen right after a kill (removed by the next start)"),
        ("orphans_removed", "temp files removed by the final recovery"),
        ("faults", "I/O faults injected at the write seam"),
        ("fault_runs", "operations run under fault injection"),
        ("ambiguous_failures", "faults after the rename: error raised, new content visible"),
        ("concurrent_ops", "operations run concurrently (processes x threads)"),
        ("lock_intervals", "lock hold intervals checked for overlap"),
        ("hostile_inputs", "hostile inputs tried"),
        ("prompt_attacks", "prompt-injection attempts"),
        ("model_steps", "stateful-model steps"),
    ]
    for key, label in order:
        terminalreporter.write_line(f"{counts.get(key, 0):>8}  {label}")
    for key in sorted(set(counts) - {k for k, _ in order} - {"losses"}):
        terminalreporter.write_line(f"{counts[key]:>8}  {key}")
    terminalreporter.write_line(f"{len(rs.LOSSES):>8}  losses (stored data lost, torn or leaked)")
    for loss in rs.LOSSES[:20]:
        terminalreporter.write_line(f"          - {loss}")
