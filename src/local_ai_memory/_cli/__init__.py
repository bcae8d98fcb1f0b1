"""The ``local-ai-memory`` command's private parts (``cli.py`` is its entry point)."""
