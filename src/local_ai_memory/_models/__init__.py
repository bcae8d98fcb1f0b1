"""Model clients: an OpenAI-compatible HTTP client and a local ONNX encoder."""
