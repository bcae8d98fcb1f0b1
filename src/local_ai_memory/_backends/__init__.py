"""Storage backends: the contract the engines use, and its implementations.

The engines (runtime memory, compressor, context building, retrieval, ranking) never touch
files or rows directly; they call a backend through the contract in this package. A backend
implements the sync methods; the async twins default to running them in a worker thread, and a
natively async backend overrides them.
"""
