"""The package surface: every exported name resolves. (That the integrations import only public
names of the library is one project-wide structure check, run over all of them at once.)"""

from __future__ import annotations

import local_ai_memory_anthropic


def test_every_exported_name_resolves() -> None:
    for name in local_ai_memory_anthropic.__all__:
        assert getattr(local_ai_memory_anthropic, name) is not None
