"""The knowledge engine: notes, their index, Stage 1 ranking and three-stage retrieval."""
