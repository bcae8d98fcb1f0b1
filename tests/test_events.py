from __future__ import annotations

import logging

import pytest

from local_ai_memory._shared.events import Event, log_event


def test_event_fields_travel_in_extra(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="local_ai_memory"):
        log_event(Event.TOOL_RESULT_STORED, tool="grep", result_id="abc", size=10, filename="x.md")
    (record,) = caplog.records
    assert record.event == "TOOL_RESULT_STORED"  # type: ignore[attr-defined]
    assert record.fields == {"tool": "grep", "result_id": "abc", "size": 10, "filename": "x.md"}  # type: ignore[attr-defined]
    assert record.getMessage() == "TOOL_RESULT_STORED tool='grep' result_id='abc' size=10 filename='x.md'"


def test_disabled_level_builds_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="local_ai_memory"):
        log_event(Event.INDEX_REFRESHED, changed=1)
    assert caplog.records == []
