"""``LocalMemoryFileSelector``: Stage 2 selection and a token budget for any LlamaIndex nodes.

Given candidate nodes from any retriever, the selector asks an LLM which of them answer the
query, with the same prompt and parser as the core's Stage 2 (:mod:`local_ai_memory._knowledge.selection`):
the nodes' metadata is shown as fenced JSON data, and only names of the given candidates are
accepted. Unlike LlamaIndex's ``LLMRerank``, which returns no nodes at all when it cannot
parse the answer, an unusable answer (or a failing LLM call) keeps the input order.

Each node is named for the LLM by its ``filename`` metadata (or ``file_name``, as LlamaIndex
readers set it, or its node id); repeated names get a ``#2``, ``#3`` suffix. The title is
the ``title`` metadata (else the first line of the text), the description the start of the
text, keywords and category come from metadata when present.

After selection, at most ``top_n`` nodes are kept, and with ``max_tokens`` set the nodes are
taken in order while their text fits the budget (a node that does not fit is skipped and
the next one tried, as in the core's Stage 3).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
from llama_index.core.llms import LLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle
from llama_index.retrievers.local_ai_memory._adapters import LlamaIndexLLMAdapter

from local_ai_memory import Event, TokenCounter
from local_ai_memory.integration import SelectionCandidate, build_selection_prompt, log_event, resolve_selection

__all__ = ["LocalMemoryFileSelector", "candidate_names", "fit_budget", "node_candidate"]

_DESCRIPTION_CHARS = 300


def _name_of(node: NodeWithScore) -> str:
    metadata = node.node.metadata
    for key in ("filename", "file_name"):
        value = metadata.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return node.node.node_id


def candidate_names(nodes: Sequence[NodeWithScore]) -> list[str]:
    """A distinct name per node, in order (repeated names get ``#2``, ``#3``...)."""
    seen: dict[str, int] = {}
    names: list[str] = []
    for node in nodes:
        base = _name_of(node)
        seen[base] = seen.get(base, 0) + 1
        name = base if seen[base] == 1 else f"{base}#{seen[base]}"
        while name in names:
            seen[base] += 1
            name = f"{base}#{seen[base]}"
        names.append(name)
    return names


def _keywords(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(word.strip() for word in value.split(",") if word.strip())
    if isinstance(value, (list, tuple)):
        return tuple(str(word) for word in value)
    return ()


def node_candidate(name: str, node: NodeWithScore) -> SelectionCandidate:
    """What the selection prompt shows about one node (pure)."""
    metadata = node.node.metadata
    text = node.node.get_content(metadata_mode=MetadataMode.NONE)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    title = metadata.get("title")
    if not isinstance(title, str) or not title.strip():
        title = lines[0].lstrip("#").strip() if lines else ""
    body = " ".join(lines[1:] if lines and lines[0].startswith("#") else lines)
    category = metadata.get("category")
    return SelectionCandidate(
        filename=name,
        title=title,
        description=body[:_DESCRIPTION_CHARS],
        keywords=_keywords(metadata.get("keywords")),
        category=category if isinstance(category, str) else "",
    )


def fit_budget(
    nodes: Sequence[NodeWithScore], counter: TokenCounter, max_tokens: int | None
) -> tuple[list[NodeWithScore], list[NodeWithScore]]:
    """``(kept, skipped)``: nodes in order while their texts' tokens sum to at most ``max_tokens``."""
    if max_tokens is None:
        return list(nodes), []
    kept: list[NodeWithScore] = []
    skipped: list[NodeWithScore] = []
    used = 0
    for node in nodes:
        tokens = counter.count(node.node.get_content(metadata_mode=MetadataMode.NONE))
        if used + tokens <= max_tokens:
            kept.append(node)
            used += tokens
        else:
            skipped.append(node)
    return kept, skipped


class LocalMemoryFileSelector(BaseNodePostprocessor):
    """Keeps the nodes an LLM selects for the query (at most ``top_n``), within ``max_tokens``.

    >>> from llama_index.core.llms import MockLLM
    >>> from llama_index.core.schema import TextNode
    >>> nodes = [NodeWithScore(node=TextNode(text=t, metadata={"filename": f}), score=1.0)
    ...          for f, t in [("a.md", "# A\\nalpha"), ("b.md", "# B\\nbeta")]]
    >>> selector = LocalMemoryFileSelector(llm=MockLLM(max_tokens=4), top_n=5)  # answers "text text ..."
    >>> [n.node.metadata["filename"] for n in selector.postprocess_nodes(nodes, query_str="beta")]
    ['a.md', 'b.md']
    """

    llm: LLM | None = Field(default=None, description="Any LlamaIndex LLM; None skips the selection step.")
    top_n: int = Field(default=5, ge=1, description="Most nodes kept.")
    max_tokens: int | None = Field(default=None, ge=1, description="Token budget of the kept nodes' text.")
    token_encoding: str = Field(default="cl100k_base", description="Encoding used to count tokens.")

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")  # a misspelt argument is an error

    _counter: TokenCounter = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        """Build the token counter once."""
        super().model_post_init(context)
        self._counter = TokenCounter(self.token_encoding)

    @classmethod
    def class_name(cls) -> str:
        return "LocalMemoryFileSelector"

    # -- shared steps

    def _prepare(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None
    ) -> tuple[list[str], dict[str, NodeWithScore], str | None]:
        names = candidate_names(nodes)
        by_name = dict(zip(names, nodes, strict=True))
        if self.llm is None or query_bundle is None or not nodes:
            return names, by_name, None
        shown = [node_candidate(name, node) for name, node in by_name.items()]
        return names, by_name, build_selection_prompt(query_bundle.query_str, shown, self.top_n)

    def _finish(
        self, names: list[str], by_name: dict[str, NodeWithScore], answer: str | None, query: str
    ) -> list[NodeWithScore]:
        selection = resolve_selection(answer, names, self.top_n, query=query)
        chosen = [by_name[name] for name in selection.names]
        kept, skipped = fit_budget(chosen, self._counter, self.max_tokens)
        for node in skipped:
            log_event(Event.FILE_SKIPPED, filename=_name_of(node), reason="over token budget")
        return kept

    @staticmethod
    def _failed(exc: Exception) -> None:
        log_event(Event.SELECTION_FALLBACK, level=logging.WARNING, reason=f"LLM call failed: {exc!r}"[:300])

    # -- sync and async shells

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        names, by_name, prompt = self._prepare(nodes, query_bundle)
        answer = None
        if prompt is not None and self.llm is not None:
            try:
                answer = LlamaIndexLLMAdapter(self.llm).complete(prompt)
            except Exception as exc:  # a failing model keeps the input order
                self._failed(exc)
        return self._finish(names, by_name, answer, query_bundle.query_str if query_bundle else "")

    async def _apostprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        names, by_name, prompt = self._prepare(nodes, query_bundle)
        answer = None
        if prompt is not None and self.llm is not None:
            try:
                answer = await LlamaIndexLLMAdapter(self.llm).acomplete(prompt)
            except Exception as exc:  # a failing model keeps the input order
                self._failed(exc)
        return self._finish(names, by_name, answer, query_bundle.query_str if query_bundle else "")
