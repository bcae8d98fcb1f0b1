"""Example storage backends on SQLite (stdlib ``sqlite3``), written from the public contracts only.

``runtime.py`` holds :class:`SQLiteRuntimeBackend` (levels L0-L3 and the session log); the
tests run the conformance kit of :mod:`local_ai_memory.testing` on it. Read them as a worked
example of ``docs/architecture.md``, "Writing a runtime backend".
"""
