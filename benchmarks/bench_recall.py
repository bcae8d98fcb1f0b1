"""Remembering across sessions: does a later session recall the turn that answers?

The cases were written by helpers who never saw the code, from a short brief: long
multi-session conversations (20+ sessions over 8-16 weeks each) with questions and the turns
that answer them, checked by two judges who saw neither the code nor each other's verdicts
(``benchmarks/data/conversations/``; only questions both judges accepted count, with the
evidence they agreed on). The third conversation of each writer was held out before any
tuning; the figures are printed for the tuning part and the held-out part apart.

What runs is what a user runs: every session is a ``memory.session(user, id)`` whose messages
go through ``finish_run`` (so the turns reach the user's conversation log as an agent's would),
then a new session asks each question with ``memory.recall(question, user, max_tokens=1000)``.
A question scores the share of its answering turns among the first k passages recalled
(R@k, averaged over questions). Beside it, on the same turns:

* ``one note per turn``: every turn stored as its own note, ranked by our Stage 1 BM25;
* ``rank_bm25``: BM25Okapi over the turns (lower-cased words);
* ``llama-index BM25``: ``BM25Retriever`` over one node per turn (skipped if not installed);
* ``MiniLM cosine``: all-MiniLM-L6-v2 over the turns (``--dense``; needs the embeddings extra).

Run: ``python benchmarks/bench_recall.py [--dense]``
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from local_ai_memory import Memory

DATA = Path(__file__).parent / "data" / "conversations"
HELD_OUT = ("w1-c3", "w2-c3")
"""Chosen before any result was seen: the third conversation of each writer."""
KS = (1, 5, 10)
BUDGET = 1000


@dataclass(frozen=True)
class Question:
    qid: str
    text: str
    kind: str
    evidence: frozenset[str]


@dataclass(frozen=True)
class Conversation:
    cid: str
    user: str
    sessions: list[dict[str, Any]]
    questions: list[Question]

    def turns(self) -> dict[str, str]:
        return {t["turn_id"]: t["text"] for s in self.sessions for t in s["turns"]}


def _accepted(raw: list[dict[str, Any]]) -> list[Question]:
    """The questions no judge called bad, each with the writer's evidence plus the turns both
    judges added (and minus those both dropped): what two readers of the text agree on."""
    by_name: dict[str, dict[str, dict[str, Any]]] = {}
    for path in sorted(DATA.glob("judge-*.json")):  # judge-a-w1.json, judge-a-w2.json: judge a
        data = json.loads(path.read_text(encoding="utf-8"))
        by_name.setdefault(path.stem.split("-")[1], {}).update({v["qid"]: v for v in data["verdicts"]})
    judges = list(by_name.values())
    out = []
    for q in raw:
        given = frozenset(q["evidence"])
        views = [judge.get(q["qid"]) for judge in judges]
        if any(v is None or v["verdict"] == "bad" for v in views):
            continue  # a judge did not see it, or found it wrong or ambiguous
        seen = [frozenset(v["evidence"]) for v in views if v is not None]
        added = frozenset.intersection(*(s - given for s in seen)) if seen else frozenset()
        dropped = frozenset.intersection(*(given - s for s in seen)) if seen else frozenset()
        out.append(Question(q["qid"], q["question"], q["kind"], (given | added) - dropped or given))
    return out


def load() -> list[Conversation]:
    found = []
    for path in sorted(DATA.glob("w*-c*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        found.append(
            # Two writers may pick the same name: each conversation is its own user.
            Conversation(
                data["conversation_id"],
                f"{data['conversation_id']}-{data['user']}",
                data["sessions"],
                _accepted(data["questions"]),
            )
        )
    return found


def _turn_of(passage: Any) -> str | None:
    """The benchmark's turn id of a recalled conversation turn (session ids are the log names)."""
    if passage.kind != "turn":
        return None
    return f"{passage.name}-t{passage.ordinal + 1:02d}"


Ranker = Callable[[Conversation, str], list[str]]


OPENED: list[Memory] = []


def ours(root: Path, hybrid: bool = False) -> tuple[Ranker, float]:
    """Sessions finished through the public API, then ``recall`` from a new session (with
    ``hybrid``: hybrid search on, with the shipped local model)."""
    if hybrid:
        from local_ai_memory._models.onnx_file import local_embedder

        memory = Memory.open(root / "hybrid", fsync=False, search_mode="hybrid", embedder=local_embedder())
    else:
        memory = Memory.open(root / "ours", fsync=False)
    OPENED.append(memory)
    started = time.perf_counter()
    for conversation in CONVERSATIONS:
        for session in conversation.sessions:
            messages = [
                {"role": turn["speaker"], "content": turn["text"], "timestamp": turn["time"]}
                for turn in session["turns"]
            ]
            memory.session(conversation.user, session["session_id"]).finish_run(messages)
    seconds = time.perf_counter() - started

    def rank(conversation: Conversation, question: str) -> list[str]:
        found = memory.recall(question, conversation.user, max_tokens=BUDGET)
        return [turn for turn in map(_turn_of, found.passages) if turn is not None]

    return rank, seconds


def note_per_turn(root: Path) -> Ranker:
    memory = Memory.open(root / "per-turn", fsync=False)
    OPENED.append(memory)
    for conversation in CONVERSATIONS:
        for turn_id, text in conversation.turns().items():
            memory.knowledge.write_note(conversation.user, turn_id, text)

    def rank(conversation: Conversation, question: str) -> list[str]:
        prefix = len(conversation.user) + 1
        hits = memory.knowledge.search(question, conversation.user, k=max(KS))
        return [hit.filename[prefix:].removesuffix(".md") for hit in hits]

    return rank


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def rank_bm25_peer() -> Ranker:
    from rank_bm25 import BM25Okapi

    built = {}
    for conversation in CONVERSATIONS:
        ids, texts = zip(*conversation.turns().items(), strict=True)
        built[conversation.cid] = (list(ids), BM25Okapi([_words(t) for t in texts]))

    def rank(conversation: Conversation, question: str) -> list[str]:
        ids, bm25 = built[conversation.cid]
        scores = bm25.get_scores(_words(question))
        return [ids[i] for i in sorted(range(len(ids)), key=lambda i: -scores[i])[: max(KS)]]

    return rank


def llama_bm25_peer() -> Ranker | None:
    try:
        from llama_index.core.schema import TextNode
        from llama_index.retrievers.bm25 import BM25Retriever
    except ImportError:
        return None
    built = {}
    for conversation in CONVERSATIONS:
        nodes = [TextNode(text=text, id_=turn) for turn, text in conversation.turns().items()]
        built[conversation.cid] = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=max(KS))

    def rank(conversation: Conversation, question: str) -> list[str]:
        return [hit.node.node_id for hit in built[conversation.cid].retrieve(question)]

    return rank


def dense_peer() -> Ranker:
    import numpy as np

    from local_ai_memory._models.onnx_file import local_embedder

    embedder = local_embedder()
    built = {}
    for conversation in CONVERSATIONS:
        ids, texts = zip(*conversation.turns().items(), strict=True)
        built[conversation.cid] = (list(ids), np.asarray(embedder.embed(list(texts)), dtype=np.float32))

    def rank(conversation: Conversation, question: str) -> list[str]:
        ids, matrix = built[conversation.cid]
        query = np.asarray(embedder.embed_query(question), dtype=np.float32)
        scores = matrix @ query
        return [ids[i] for i in np.argsort(-scores)[: max(KS)]]

    return rank


def score(rank: Ranker, conversations: Sequence[Conversation]) -> tuple[list[float], int]:
    totals = [0.0] * len(KS)
    count = 0
    for conversation in conversations:
        for question in conversation.questions:
            ranked = rank(conversation, question.text)
            for i, k in enumerate(KS):
                totals[i] += len(question.evidence.intersection(ranked[:k])) / len(question.evidence)
            count += 1
    return [t / count if count else 0.0 for t in totals], count


CONVERSATIONS: list[Conversation] = []


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--dense", action="store_true", help="also hybrid recall and the MiniLM cosine baseline (embeddings extra)"
    )
    parser.add_argument("--tuning-only", action="store_true", help="print the tuning part only (while tuning)")
    args = parser.parse_args()
    CONVERSATIONS.extend(load())
    if not CONVERSATIONS:
        sys.exit(f"no conversations under {DATA}")
    tuning = [c for c in CONVERSATIONS if c.cid not in HELD_OUT]
    held = [c for c in CONVERSATIONS if c.cid in HELD_OUT]
    turns = sum(len(c.turns()) for c in CONVERSATIONS)
    sessions = sum(len(c.sessions) for c in CONVERSATIONS)
    print(f"{len(CONVERSATIONS)} conversations, {sessions} sessions, {turns} turns; recall budget {BUDGET} tokens")
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        methods: dict[str, Ranker] = {}
        for label, hybrid in (("recall", False), ("recall, hybrid", True)) if args.dense else (("recall", False),):
            ranker, seconds = ours(root, hybrid)
            methods[f"ours: {label}"] = ranker
            each = 1000 * seconds / sessions
            print(f"ours, {label}: {sessions} sessions finished in {seconds:.1f} s ({each:.1f} ms each)")
        methods["ours: one note per turn"] = note_per_turn(root)
        methods["rank_bm25 (BM25Okapi)"] = rank_bm25_peer()
        llama = llama_bm25_peer()
        if llama is not None:
            methods["llama-index BM25"] = llama
        if args.dense:
            methods["MiniLM cosine"] = dense_peer()
        parts = [("tuning", tuning)] + ([] if args.tuning_only else [("held out", held)])
        for label, part in parts:
            print(f"\n{label}: " + ", ".join(c.cid for c in part))
            print(f"{'method':<28}" + "".join(f"{'R@' + str(k):>8}" for k in KS) + f"{'questions':>11}")
            for name, rank in methods.items():
                started = time.perf_counter()
                figures, count = score(rank, part)
                ms = 1000 * (time.perf_counter() - started) / max(count, 1)
                print(f"{name:<28}" + "".join(f"{f:>8.3f}" for f in figures) + f"{count:>11}   {ms:.1f} ms/q")
        for memory in OPENED:
            memory.close()


if __name__ == "__main__":
    main()
