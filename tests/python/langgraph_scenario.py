"""A real LangGraph run through one of the three telemetry routes LangChain users have, exported with the stock
OTLP HTTP exporter into stepline:

  --route openinference  openinference-instrumentation-langchain (`LangChainInstrumentor`)
  --route openllmetry    opentelemetry-instrumentation-langchain (`LangchainInstrumentor`)
  --route langsmith      langsmith's own OTel mode (LANGSMITH_TRACING=true, LANGSMITH_TRACING_MODE=otel), which
                         exports through the global TracerProvider set here

The agent is `langchain.agents.create_agent` (a LangGraph graph) named "weather_agent", with a scripted
GenericFakeChatModel (`bind_tools` returns the model), an InMemorySaver checkpointer and two user turns on one
thread:
  turn 1: get_weather("Paris") and add(2, 3) in parallel, then book_table (which fails: ToolException with
          handle_tool_error, so the model sees the error and the graph goes on), then a final answer;
  turn 2: get_weather("Rome"), then a final answer.

Default mode prints one JSON line: {"state": LangGraph's own state["messages"] normalised, "export": {...},
"invocations": 2}. With --record FILE the finished spans are also written to FILE as JSON (the fixtures in
src/interpreter/fixtures/ were made this way). With --continue-from FILE (a stepline `format=openai-chat`
continuation as JSON) the continuation's messages are converted by LangChain itself (`convert_to_messages`) and
printed normalised, then handed to a fresh agent (no system prompt of its own: the continuation's first
message is it) with one more user turn; prints {"continued": [...], "follow_up": [...]}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

SYSTEM_PROMPT = "You are a weather and booking assistant."
AGENT_NAME = "weather_agent"


def normalise(messages: list[Any]) -> list[dict[str, Any]]:
    """LangChain messages as plain dicts: type, text content, tool calls (id, name, args), tool_call_id."""
    out = []
    for m in messages:
        content = m.content
        if isinstance(content, list):
            content = "".join(
                b.get("text", "") if isinstance(b, dict) else str(b) for b in content
            )
        item: dict[str, Any] = {"type": m.type, "content": content}
        calls = getattr(m, "tool_calls", None) or []
        if calls:
            item["tool_calls"] = [
                {"id": c["id"], "name": c["name"], "args": c["args"]} for c in calls
            ]
        if m.type == "tool":
            item["tool_call_id"] = m.tool_call_id
        out.append(item)
    return out


def build_agent(script: list[Any], checkpointer: Any, system_prompt: str | None = SYSTEM_PROMPT) -> Any:
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.tools import ToolException, tool

    class ToolModel(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    @tool
    def add(a: int, b: int) -> int:
        """Adds two numbers."""
        return a + b

    def book(restaurant: str, people: int) -> str:
        raise ToolException(f"no table for {people} at {restaurant}")

    from langchain_core.tools import StructuredTool

    book_table = StructuredTool.from_function(
        func=book,
        name="book_table",
        description="Books a table.",
        handle_tool_error=True,
    )

    model = ToolModel(messages=iter(script))
    return create_agent(
        model,
        [get_weather, add, book_table],
        system_prompt=system_prompt,
        checkpointer=checkpointer,
        name=AGENT_NAME,
    )


def scripted_turns() -> list[Any]:
    from langchain_core.messages import AIMessage

    return [
        AIMessage(
            content="",
            tool_calls=[
                {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_w1"},
                {"name": "add", "args": {"a": 2, "b": 3}, "id": "call_a1"},
            ],
        ),
        AIMessage(
            content="",
            tool_calls=[
                {
                    "name": "book_table",
                    "args": {"restaurant": "Chez Nous", "people": 4},
                    "id": "call_b1",
                }
            ],
        ),
        AIMessage(content="Sunny in Paris, 2+3=5, and no table at Chez Nous."),
        AIMessage(
            content="",
            tool_calls=[{"name": "get_weather", "args": {"city": "Rome"}, "id": "call_w2"}],
        ),
        AIMessage(content="Rome is sunny too."),
    ]


def setup_tracing(route: str, endpoint: str, recorder: Any) -> Any:
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from otlp_setup import CountingExporter, make_exporter

    exporter = CountingExporter(make_exporter("http", endpoint))
    provider = TracerProvider(resource=Resource.create({"service.name": f"langgraph-{route}"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    if recorder is not None:
        provider.add_span_processor(SimpleSpanProcessor(recorder))
    trace.set_tracer_provider(provider)
    if route == "openinference":
        from openinference.instrumentation.langchain import LangChainInstrumentor

        LangChainInstrumentor().instrument(tracer_provider=provider)
    elif route == "openllmetry":
        from opentelemetry.instrumentation.langchain import LangchainInstrumentor

        LangchainInstrumentor().instrument(tracer_provider=provider)
    return provider, exporter


def record_spans(recorder: Any, path: str, route: str) -> None:
    import importlib.metadata as md

    packages = [
        "langchain",
        "langchain-core",
        "langgraph",
        "langsmith",
        "openinference-instrumentation-langchain",
        "opentelemetry-instrumentation-langchain",
        "opentelemetry-sdk",
    ]
    spans = []
    for s in recorder.get_finished_spans():
        ctx = s.get_span_context()
        spans.append(
            {
                "trace_id": f"{ctx.trace_id:032x}",
                "span_id": f"{ctx.span_id:016x}",
                "parent_span_id": f"{s.parent.span_id:016x}" if s.parent else None,
                "name": s.name,
                "kind": s.kind.value,
                "start_ns": s.start_time,
                "end_ns": s.end_time,
                "status": {"code": s.status.status_code.value, "message": s.status.description},
                "attributes": {k: (list(v) if isinstance(v, tuple) else v) for k, v in s.attributes.items()},
            }
        )
    doc = {
        "route": route,
        "recorded_by": "tests/python/langgraph_scenario.py --record",
        "packages": {p: md.version(p) for p in packages},
        "spans": spans,
    }
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.route == "langsmith":
        os.environ["LANGSMITH_TRACING"] = "true"
        os.environ["LANGSMITH_TRACING_MODE"] = "otel"
        os.environ.setdefault("LANGSMITH_API_KEY", "offline")
    recorder = None
    if args.record:
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        recorder = InMemorySpanExporter()
    provider, exporter = setup_tracing(args.route, args.endpoint, recorder)

    from langgraph.checkpoint.memory import InMemorySaver

    agent = build_agent(scripted_turns(), InMemorySaver())
    config = {"configurable": {"thread_id": args.thread}}
    agent.invoke({"messages": [{"role": "user", "content": "Weather in Paris, 2+3, and a table?"}]}, config)
    state = agent.invoke({"messages": [{"role": "user", "content": "And in Rome?"}]}, config)
    if args.route == "langsmith":
        from langsmith.run_trees import get_cached_client

        get_cached_client().flush()
    provider.force_flush()
    if recorder is not None:
        record_spans(recorder, args.record, args.route)
    return {"state": normalise(state["messages"]), "export": exporter.stats(), "invocations": 2}


def continue_from(args: argparse.Namespace) -> dict[str, Any]:
    from langchain_core.messages import AIMessage, convert_to_messages
    from langgraph.checkpoint.memory import InMemorySaver

    with open(args.continue_from) as f:
        continuation = json.load(f)
    messages = convert_to_messages(continuation["messages"])
    # The continuation carries the system prompt as its first message: the agent gets none of its own.
    agent = build_agent([AIMessage(content="Still sunny.")], InMemorySaver(), system_prompt=None)
    state = agent.invoke(
        {"messages": list(messages) + [{"role": "user", "content": "Anything else?"}]},
        {"configurable": {"thread_id": "follow-up"}},
    )
    return {"continued": normalise(messages), "follow_up": normalise(state["messages"])}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--route", choices=["openinference", "openllmetry", "langsmith"], required=True)
    parser.add_argument("--endpoint", default="http://127.0.0.1:4318")
    parser.add_argument("--thread", default="thread-1")
    parser.add_argument("--record")
    parser.add_argument("--continue-from")
    args = parser.parse_args()
    out = continue_from(args) if args.continue_from else run(args)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
