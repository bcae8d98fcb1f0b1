"""Write the notebooks in ``notebooks/`` from the cell sources below, then execute them.

Notebooks are JSON and hard to review; this script is their readable source. Run it after
changing a cell: ``.venv/bin/python scripts/build_notebooks.py`` (``--no-execute`` to skip
running them). The test command executes every notebook again with nbmake.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "notebooks"
Cell = tuple[str, str]  # ("md" | "code", source)


def md(text: str) -> Cell:
    return ("md", text.strip("\n"))


def code(text: str) -> Cell:
    return ("code", text.strip("\n"))


QUICKSTART: list[Cell] = [
    md("""
# local-ai-memory quickstart

This notebook runs offline. It shows the two halves of the library on real text:

* **runtime memory** for one conversation, scoped per `(user_id, session_id)`: L0 state,
  L1 working memory, L2 checkpoints and L3 stored tool outputs;
* **knowledge memory**: Markdown notes, a BM25 index and three-stage retrieval within a token
  budget.

Everything lives in plain files under one folder; we use a temporary one here.
"""),
    code("""
import inspect
import json
import tempfile
from pathlib import Path

from local_ai_memory import Memory, render_page
from local_ai_memory.samples import build_corpus, write_corpus

root = Path(tempfile.mkdtemp(prefix="lam-quickstart-"))
memory = Memory.open(root, working_memory_target_tokens=200)  # the data folder is given once
print("data root:", memory.root)
"""),
    md("""
## Runtime memory

`memory.session(user_id, session_id)` is one conversation's memory. Every write is atomic and
safe across processes; every method has an async twin (`aupdate_state`, ...).
"""),
    code("""
session = memory.session("alice", "notebook")
session.update_state({"current_task": "learn how json decodes numbers", "current_step": 1})
session.get_state()
"""),
    md("""
A tool output above 6,144 UTF-8 bytes is stored in L3; the model gets a small reference and
can page the full text back with `load_tool_result`.
"""),
    code("""
import json.decoder

output = inspect.getsource(json.decoder)  # a real, large tool output
reference = json.loads(session.externalize("read_source", output))
print(f"{len(output.encode()):,} bytes ->", {k: v if k != "summary" else v[:50] + "…" for k, v in reference.items()})

page = session.load_page(reference["result_id"], offset=0, limit=3_000)  # only this session can load it
print(render_page(page)[:300])
"""),
    code("""
with session.checkpoint_run("study-json", task="learn how json decodes numbers") as run:
    run.step(tool_result_ids=[reference["result_id"]])

transcript = [
    {"role": "user", "content": "How does the json decoder turn number literals into Python numbers?"},
    {"role": "tool", "name": "read_source", "content": json.dumps(reference)},
    {"role": "assistant", "content": "Found that NUMBER_RE matches it; parse_float or parse_int converts it."},
    {"role": "assistant", "content": "We will explain the parse_float hook in the answer."},
]
result = session.compressor.merge_new(transcript)
print(result.method, result.tokens_before, "->", result.tokens_after, "tokens")
session  # the HTML view shows L0, L1, L2 and L3
"""),
    md("""
## Knowledge memory

We write one note per Python standard-library module (built from the docstrings installed on
this machine) and ask a question taken from a function docstring that was left out of the notes.
"""),
    code("""
paths = write_corpus(memory.knowledge.store, "alice")
corpus = build_corpus()
query = next(q for q in corpus.queries if q.module == "shutil")
print(len(paths), "notes; question:", query.text, "| expected:", query.module)

found = memory.knowledge.retrieve(query.text, "alice", max_tokens=3000)  # no LLM: Stage 2 keeps the BM25 order
found
"""),
    md("Stage 1 scores of the candidates, and how much of the token budget Stage 3 used:"),
    code("""
import matplotlib.pyplot as plt

fig, (scores, budget) = plt.subplots(1, 2, figsize=(10, 3))
names = [c.filename.removeprefix("alice_") for c in found.candidates]
scores.barh(names[::-1], [c.score for c in found.candidates][::-1], color="#4c72b0")
scores.set_title("Stage 1 BM25 scores")
used = [f.tokens for f in found.files]
budget.barh(["budget"], [found.max_tokens], color="#dddddd")
left = 0
for file in found.files:
    budget.barh(["budget"], [file.tokens], left=left, label=file.filename.removeprefix("alice_"))
    left += file.tokens
budget.set_title(f"Stage 3: {found.used_tokens} of {found.max_tokens} tokens")
budget.legend(loc="lower right", fontsize=8)
plt.tight_layout()
plt.show()
"""),
    md("""
## Your data

Everything kept about a user can be listed, inspected, exported to one archive and erased
(all or nothing, even if the process dies half-way). The same is on the command line:
`local-ai-memory sessions / show / export / forget / import`.
"""),
    code("""
for user in memory.users():
    print(user.user_id, f"{user.size:,} bytes,", user.notes, "notes,", [s.scope.session_id for s in user.sessions])
report = memory.show("alice", "notebook")
print("checkpoints:", [(c.plan_id, c.status, c.step) for c in report.checkpoints])
print("stored tool outputs:", len(report.tool_results))

archive = root.parent / f"{root.name}-alice.zip"
manifest = memory.export(archive, "alice")
print(f"exported {len(manifest.sessions)} session(s) and {len(manifest.notes)} notes to {archive.name}")
erased = memory.forget_user("alice")
print(f"forgot alice: {len(erased.notes)} notes and {erased.runtime_bytes:,} bytes of runtime memory")
print("users now:", memory.users())
memory.import_archive(archive)
print("imported again; search finds:", memory.knowledge.search(query.text, "alice", k=1)[0].filename)
"""),
    md("## The files on disk"),
    code("""
for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")):
    relative = path.relative_to(root).as_posix()
    if "/knowledge/" not in relative:
        print(f"{path.stat().st_size:>9,}  {relative}")
print(f"{len(paths):>9}  notes under memory_data/knowledge/")
"""),
    md("""
Set `LOCAL_AI_MEMORY_BASE_URL` and `LOCAL_AI_MEMORY_MODEL` and open the memory with
`Memory.open(root, llm=llm_from_env())` to let a local or hosted OpenAI-compatible model
choose the files (Stage 2) and write the working memory.
"""),
]

LANGCHAIN: list[Cell] = [
    md("""
# local-ai-memory with a LangChain agent

Offline, with a scripted chat model standing in for a real one (swap in any LangChain chat
model, e.g. `init_chat_model("openai:qwen2.5:7b", base_url="http://localhost:11434/v1")`).
We use the knowledge retriever and tools, then run a `create_agent` agent with
`LocalMemoryMiddleware`: a 200 KB tool output goes to L3 and is paged back, and a run
interrupted half way resumes from its checkpoint.
"""),
    code("""
import inspect
import json
import re
import tempfile
from pathlib import Path

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from local_ai_memory import Memory
from local_ai_memory.samples import build_corpus, write_corpus


class ScriptedChatModel(BaseChatModel):
    \"\"\"A chat model whose next message is ``policy(messages)``; records what it received.\"\"\"

    policy: object
    received: list = []

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.received.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=self.policy(messages))])


root = Path(tempfile.mkdtemp(prefix="lam-langchain-"))
memory = Memory.open(root)  # one memory: every adapter below is handed this one
print("data root:", root)
"""),
    md("## The knowledge retriever and the memory tools"),
    code("""
from langchain_local_ai_memory import LocalMemoryRetriever, create_memory_tools

write_corpus(memory.knowledge.store, "alice")
question = next(q for q in build_corpus().queries if q.module == "shutil")
retriever = LocalMemoryRetriever(memory=memory, user_id="alice")  # llm=chat_model adds Stage 2
for doc in retriever.invoke(question.text, k=3):
    meta = doc.metadata
    print(meta["filename"], round(meta["score"], 2), "stage", meta["stage"], len(doc.page_content), "chars")

load_tool_result, search_memory = create_memory_tools("alice", "s1", retriever=retriever)
print(search_memory.invoke({"query": question.text})[:300])
"""),
    md("""
## An agent with `LocalMemoryMiddleware`

The scripted model calls `read_source` (which returns about 200 KB of real source), then pages
the stored output back with `load_tool_result` until the end, then answers.
"""),
    code("""
import argparse as argparse_module

from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_local_ai_memory import LocalMemoryMiddleware

SOURCE = inspect.getsource(argparse_module) * 2
runs = {"read_source": 0}


@tool
def read_source() -> str:
    \"\"\"Return the source code of the argparse module.\"\"\"
    runs["read_source"] += 1
    return SOURCE


def call(name, call_id, **args):
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])


def paging_policy(messages):
    tools = [m for m in messages if isinstance(m, ToolMessage)]
    if not tools:
        return call("read_source", "c0")
    last = tools[-1]
    if last.name == "read_source":
        reference = json.loads(last.content)
        return call("load_tool_result", "c1", result_id=reference["result_id"], offset=0, limit=20_000)
    header = last.content.splitlines()[0]
    following = re.search(r"offset=(\\d+) for the next", header)
    if following:
        result_id = re.search(r"tool result (\\w+)", header).group(1)
        offset = int(following.group(1))
        return call("load_tool_result", f"c{len(tools)}", result_id=result_id, offset=offset, limit=20_000)
    return AIMessage(content="Subcommands are an _SubParsersAction that dispatches on the first argument.")


model = ScriptedChatModel(policy=paging_policy)
middleware = LocalMemoryMiddleware("alice", "agent-run", memory=memory)
agent = create_agent(model, tools=[read_source], middleware=[middleware])
result = agent.invoke({"messages": [{"role": "user", "content": "How does argparse dispatch subcommands?"}]})
print(result["messages"][-1].content)
largest = max(len(str(m.content)) for messages in model.received for m in messages)
print(f"tool output {len(SOURCE.encode()):,} bytes; largest message the model received: {largest:,} characters")
"""),
    code("""
memory.session("alice", "agent-run")  # L0, L1, L2 and L3 of the run
"""),
    md("""
## Interrupt and resume

This time the model is interrupted (as by Ctrl-C) when it asks for the second page. The
checkpoint stays resumable; running the same `(user_id, session_id)` again continues from it:
the big tool is not run again.
"""),
    code("""
interrupted = {"done": False}


def flaky_policy(messages):
    step = paging_policy(messages)
    wants_second_page = step.tool_calls and step.tool_calls[0]["args"].get("offset") == 20_000
    if wants_second_page and not interrupted["done"]:
        interrupted["done"] = True
        raise KeyboardInterrupt("Ctrl-C")
    return step


runs["read_source"] = 0
model = ScriptedChatModel(policy=flaky_policy)
resumable = LocalMemoryMiddleware("alice", "resumable", memory=memory)
agent = create_agent(model, tools=[read_source], middleware=[resumable])
task = {"messages": [{"role": "user", "content": "How does argparse dispatch subcommands?"}]}
try:
    agent.invoke(task)
except KeyboardInterrupt:
    print("interrupted")

scope = memory.session("alice", "resumable")
checkpoint = scope.resumable()
print("resumable checkpoint:", checkpoint.status, "at step", checkpoint.step)

result = agent.invoke(task)  # the same scope: resumes
print(result["messages"][-1].content)
print("read_source ran", runs["read_source"], "time(s); L0:", scope.get_state())
"""),
    md("""
## One L2 with LangGraph: the checkpointer

Give the agent a LangGraph checkpointer and LangGraph keeps every step: `LocalMemorySaver`
stores them in the same memory (a thread is a session), and the middleware then writes no
checkpoint of its own. Resuming is LangGraph's: `agent.invoke(None, thread)` continues the thread.
"""),
    code("""
runs["read_source"] = 0
interrupted["done"] = False  # interrupt once more, at the same point
model = ScriptedChatModel(policy=flaky_policy)
graph_memory = LocalMemoryMiddleware("alice", "graph-thread", memory=memory)
agent = create_agent(
    model, tools=[read_source], middleware=[graph_memory], checkpointer=graph_memory.checkpointer()
)
thread = {"configurable": {"thread_id": "graph-thread"}}
try:
    agent.invoke(task, thread, durability="sync")
except KeyboardInterrupt:
    print("interrupted at LangGraph step", agent.get_state(thread).metadata["step"])

result = agent.invoke(None, thread, durability="sync")  # continue the thread where it stopped
print(result["messages"][-1].content)
print("read_source ran", runs["read_source"], "time(s)")
print("checkpoints kept by LangGraph:", len(list(agent.get_state_history(thread))))
session = memory.session("alice", "graph-thread")
print("L0 step counter:", session.get_state()["current_step"], "| run status:", session.bookkeeping()["run_status"])
"""),
]


LLAMAINDEX: list[Cell] = [
    md("""
# local-ai-memory with LlamaIndex

Offline, with LlamaIndex's own mock models. We use:

1. `LocalMemoryRetriever` in a `RetrieverQueryEngine` over notes built from the Python
   standard library,
2. `LocalMemoryFileSelector`, the Stage 2 postprocessor that keeps the input order when the
   model's answer is unusable (where `LLMRerank` returns nothing),
3. `LocalMemoryToolSpec` in a `FunctionAgent`: a 200 KB tool output is stored on disk, the agent
   sees a reference and pages the text back, and `LocalWorkingMemoryBlock` keeps L1 working
   memory that a restarted agent gets back.
"""),
    code("""
import json
import tempfile
import warnings
from pathlib import Path

from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.retrievers.local_ai_memory import LocalMemoryRetriever
from local_ai_memory import Memory as LocalMemory
from local_ai_memory.samples import build_corpus, write_corpus

# The installed `workflows` package touches deprecated pydantic attributes when agents are built.
warnings.filterwarnings("ignore", category=DeprecationWarning, module="pydantic")

root = Path(tempfile.mkdtemp(prefix="lam-llamaindex-"))
ours = LocalMemory.open(root)  # local_ai_memory.Memory: one memory for every adapter below
retriever = LocalMemoryRetriever(memory=ours, user_id="alice", max_tokens=2000)
notes = write_corpus(ours.knowledge.store, "alice")
print(len(notes), "notes for alice under", root / "memory_data" / "knowledge")
"""),
    md("## A query engine over the knowledge memory"),
    code("""
question = next(q for q in build_corpus().queries if q.module == "json")
engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM(max_tokens=40))
response = engine.query(question.text)
print("question:", question.text)
for hit in response.source_nodes:
    print(f"{hit.score:7.2f}  {hit.node.metadata['filename']:<28} {hit.node.metadata['title']}")
"""),
    md("""
## The selector postprocessor

`MockLLM(max_tokens=4)` answers `text text text text`, which names no file. LlamaIndex's
`LLMRerank` then returns no nodes at all; `LocalMemoryFileSelector` keeps the Stage 1 order.
"""),
    code("""
from llama_index.core.postprocessor import LLMRerank
from llama_index.core.schema import QueryBundle
from llama_index.postprocessor.local_ai_memory import LocalMemoryFileSelector

nodes = retriever.retrieve(question.text)
bad_model = MockLLM(max_tokens=4)
kept = LocalMemoryFileSelector(llm=bad_model, top_n=3).postprocess_nodes(nodes, query_str=question.text)
theirs = LLMRerank(llm=bad_model, top_n=3).postprocess_nodes(nodes, QueryBundle(question.text))
print("LocalMemoryFileSelector keeps:", [n.node.metadata["filename"] for n in kept])
print("LLMRerank keeps:           ", [n.node.metadata["filename"] for n in theirs])
"""),
    md("""
## An agent whose large tool output never enters its context

The model here is LlamaIndex's `MockFunctionCallingLLM` playing a script: call `read_source`,
then page the stored result back twice with `load_tool_result`, then answer.
"""),
    code("""
import inspect

import argparse as argparse_module
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool
from llama_index.memory.local_ai_memory import LocalWorkingMemoryBlock
from llama_index.tools.local_ai_memory import LocalMemoryToolSpec

source = inspect.getsource(argparse_module) * 2  # about 200 KB of real text


def read_source() -> str:
    \"\"\"Return the source of the argparse module.\"\"\"
    return source


def call(name, call_id, **kwargs):
    block = ToolCallBlock(tool_call_id=call_id, tool_name=name, tool_kwargs=kwargs)
    return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])


seen = []


def script(messages, **kwargs):
    messages = list(messages)
    seen.append(messages)
    tool_texts = [m.content or "" for m in messages if m.role == MessageRole.TOOL]
    if not tool_texts:
        return call("read_source", "c1")
    if len(tool_texts) == 1:
        reference = json.loads(tool_texts[-1])
        return call("load_tool_result", "c2", result_id=reference["result_id"], offset=0, limit=3000)
    if len(tool_texts) == 2:
        result_id = tool_texts[-1].split()[2]
        return call("load_tool_result", "c3", result_id=result_id, offset=3000, limit=3000)
    return ChatMessage(role=MessageRole.ASSISTANT, content="Decision: explain subparsers from the pages read.")


manager = ours.session("alice", "notebook")  # the same memory the retriever uses
spec = LocalMemoryToolSpec(memory=ours, user_id="alice", session_id="notebook")
tools = [*spec.wrap_tools([FunctionTool.from_defaults(fn=read_source)]), *spec.to_tool_list()]
block = LocalWorkingMemoryBlock(memory=ours, user_id="alice", session_id="notebook")
agent = FunctionAgent(tools=tools, llm=MockFunctionCallingLLM(response_generator=script), streaming=False)

from llama_index.core.memory import Memory

memory = Memory.from_defaults(session_id="notebook", memory_blocks=[block], token_limit=30_000)
answer = await agent.run("How does argparse handle subcommands? Read its source.", memory=memory)
print("answer:", answer)
largest = max(len(m.content or "") for messages in seen for m in messages)
print("largest message the model ever received:", largest, "characters")
print("the tool output on disk:", len(source.encode()), "bytes")
"""),
    code("""
await block.asummarize_memory(memory)  # merge the run into L1 working memory
manager  # L0, L1, L2 and L3 of this scope
"""),
    md("A restarted agent builds a new block on the same scope: `Memory` puts L1 into its system message."),
    code("""
restarted = LocalMemory.open(root)  # a new process: a new local_ai_memory.Memory on the same folder
again = LocalWorkingMemoryBlock(memory=restarted, user_id="alice", session_id="notebook")
fresh = Memory.from_defaults(memory_blocks=[again])
system = (await fresh.aget(input="Where were we?"))[0].content
print(system[:600])
"""),
]


NOTEBOOKS: dict[str, list[Cell]] = {
    "01_quickstart": QUICKSTART,
    "02_langchain_agent": LANGCHAIN,
    "03_llamaindex": LLAMAINDEX,
}


def build(name: str, cells: list[Cell], execute: bool) -> Path:
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.metadata["language_info"] = {"name": "python"}
    notebook.cells = [
        nbformat.v4.new_markdown_cell(src) if kind == "md" else nbformat.v4.new_code_cell(src) for kind, src in cells
    ]
    for number, cell in enumerate(notebook.cells):
        cell["id"] = f"{name}-{number}"
    if execute:
        where = {"metadata": {"path": str(OUT)}}
        client = NotebookClient(notebook, timeout=600, kernel_name="python3", resources=where)
        client.execute()
    path = OUT / f"{name}.ipynb"
    nbformat.write(notebook, path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--no-execute", action="store_true")
    parser.add_argument("names", nargs="*", help="notebooks to build (default: all)")
    args = parser.parse_args()
    for name in args.names or NOTEBOOKS:
        print(build(name, NOTEBOOKS[name], not args.no_execute))


if __name__ == "__main__":
    main()
