"""A real Google ADK (google-adk) run exported to stepline over OTLP, with a scripted model (no network).

The "trip" agent (an `LlmAgent` whose model is a `BaseLlm` subclass that answers from a script, giving
no function-call ids, as Gemini usually does) runs two user turns on one session of an `InMemoryRunner`:
  turn 1: two parallel calls `get_weather` {city: Paris} and `add` {a: 2, b: 3}; then one more,
          after a text part, `book_table` {party: 4} (ADK's telemetry then calls it `book_table_1`
          and its response `book_table_0`), which raises (the agent's `on_tool_error_callback` turns the error
          into the tool's response, so the turn goes on, and ADK marks the tool span failed);
          then a text answer;
  turn 2: `get_weather` {city: Rome}, then a text answer.
Traces and logs go out through the stock OTLP/HTTP exporters. `--capture` sets
OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT (SPAN_ONLY: content on spans; EVENT_ONLY: content
only in `gen_ai.client.inference.operation.details` log records; NO_CONTENT: none).

With --continue-from FILE (stepline's `format=gemini` continuation as JSON), a new session is filled
with events built from the continuation's `contents` and the agent is asked one more question; the
script reports the contents the model received for it, so the test can check ADK accepted the history.

Prints exactly one JSON line: {"session_id", "invocations", "events", "received", "export"}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any, AsyncGenerator

APP = "stepline-adk"
USER = "u1"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--session-id", required=True)
    parser.add_argument("--capture", choices=["SPAN_ONLY", "EVENT_ONLY", "NO_CONTENT"], required=True)
    parser.add_argument("--continue-from")
    args = parser.parse_args()
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = args.capture

    from opentelemetry import _logs
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

    from otlp_setup import install_tracer_provider

    provider, exporter = install_tracer_provider("http", args.endpoint, "stepline-e2e-adk")
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(
        BatchLogRecordProcessor(
            OTLPLogExporter(endpoint=args.endpoint.rstrip("/") + "/v1/logs"), schedule_delay_millis=500
        )
    )
    _logs.set_logger_provider(logger_provider)

    from google.adk.agents import LlmAgent
    from google.adk.events import Event
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    def call(name: str, **kwargs: Any) -> types.Part:
        return types.Part(function_call=types.FunctionCall(name=name, args=kwargs))

    def text(t: str) -> list[types.Part]:
        return [types.Part(text=t)]

    script: list[list[types.Part]] = [
        [call("get_weather", city="Paris"), call("add", a=2, b=3)],
        [types.Part(text="Booking now."), call("book_table", party=4)],
        text("Paris is sunny, 2 + 3 = 5, and no table is free."),
        [call("get_weather", city="Rome")],
        text("Rome is sunny too."),
    ]
    if args.continue_from:
        script = [text("Oslo is cold.")]
    received: list[Any] = []

    class ScriptedModel(BaseLlm):
        """Answers from `script`, in order; records the contents of every request."""

        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            received.append([c.model_dump(mode="json", exclude_none=True) for c in llm_request.contents])
            parts = script.pop(0) if script else text("(script exhausted)")
            yield LlmResponse(
                content=types.Content(role="model", parts=parts),
                usage_metadata=types.GenerateContentResponseUsageMetadata(
                    prompt_token_count=10, candidates_token_count=5, total_token_count=15
                ),
            )

    def get_weather(city: str) -> dict:
        """The weather in a city."""
        return {"city": city, "sky": "sunny"}

    def add(a: int, b: int) -> int:
        """Adds two numbers."""
        return a + b

    def book_table(party: int) -> dict:
        """Books a table for a party."""
        raise RuntimeError(f"no table free for {party}")

    def on_tool_error(tool: Any, args: dict, tool_context: Any, error: Exception) -> dict:
        return {"error": str(error)}

    agent = LlmAgent(
        name="trip",
        description="Plans trips.",
        model=ScriptedModel(model="scripted-model"),
        instruction="You plan trips.",
        tools=[get_weather, add, book_table],
        on_tool_error_callback=on_tool_error,
    )
    runner = InMemoryRunner(agent=agent, app_name=APP)

    async def turn(session_id: str, message: str) -> None:
        content = types.Content(role="user", parts=[types.Part(text=message)])
        async for _ in runner.run_async(user_id=USER, session_id=session_id, new_message=content):
            pass

    async def run() -> dict[str, Any]:
        service = runner.session_service
        session = await service.create_session(app_name=APP, user_id=USER, session_id=args.session_id)
        if args.continue_from:
            with open(args.continue_from) as f:
                cont = json.load(f)
            for c in cont["contents"]:
                content = types.Content.model_validate(c)
                author = "user" if content.role == "user" else agent.name
                await service.append_event(session, Event(author=author, content=content, invocation_id="restored"))
            await turn(session.id, "And in Oslo?")
        else:
            await turn(session.id, "Weather in Paris, and 2 + 3? Then book a table for 4.")
            await turn(session.id, "And in Rome?")
        session = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        events = [
            {
                "author": e.author,
                "invocation_id": e.invocation_id,
                "content": e.content.model_dump(mode="json", exclude_none=True) if e.content else None,
            }
            for e in session.events
        ]
        invocations = sorted({e.invocation_id for e in session.events})
        return {"session_id": session.id, "events": events, "invocations": invocations}

    out = asyncio.run(run())
    provider.force_flush()
    logger_provider.force_flush()
    provider.shutdown()
    logger_provider.shutdown()
    out["received"] = received
    out["export"] = exporter.stats()
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
