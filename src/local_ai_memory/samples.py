"""A sample corpus of real text (notes built from the installed standard library) with held-out queries.

Used by the demo, the notebooks, the tests and the benchmarks; handy for trying retrieval on
something real without bringing your own notes.
"""

from local_ai_memory._knowledge.samples import EvalQuery, SampleCorpus, build_corpus, write_corpus

__all__ = ["EvalQuery", "SampleCorpus", "build_corpus", "write_corpus"]
