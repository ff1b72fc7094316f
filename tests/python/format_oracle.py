"""The oracle for stepline's provider formats: Pydantic AI's own model classes.

For each snapshot of a run, loads stepline's `pydantic-ai` continuation with
`ModelMessagesTypeAdapter`, hands it to OpenAIChatModel, OpenAIResponsesModel, AnthropicModel and
GoogleModel, and captures the HTTP request each would send (an httpx2 MockTransport answers every
request with an error after recording it; no network). Interrupted snapshots are fetched with
`repair=true`.

Prints one JSON line: {"<seq>": {"openai-chat": {"messages": ...}, "openai-responses":
{"instructions", "input"}, "anthropic": {"system", "messages"}, "gemini": {"system_instruction",
"contents"}}}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import urllib.parse
import urllib.request

import httpx2
from pydantic_ai.messages import ModelMessagesTypeAdapter
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.google import GoogleModel
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.google import GoogleProvider
from pydantic_ai.providers.openai import OpenAIProvider


class Captured(Exception):
    """Raised by the mock transport once the request is recorded, so nothing goes further."""


def capturing_client(sink: list[dict]) -> httpx2.AsyncClient:
    def handler(request: httpx2.Request) -> httpx2.Response:
        sink.append(json.loads(request.content.decode()))
        raise Captured()

    return httpx2.AsyncClient(transport=httpx2.MockTransport(handler), timeout=30)


def models(sink: list[dict]):
    yield "openai-chat", OpenAIChatModel(
        "gpt-4o", provider=OpenAIProvider(api_key="test", http_client=capturing_client(sink))
    )
    yield "openai-responses", OpenAIResponsesModel(
        "gpt-4o", provider=OpenAIProvider(api_key="test", http_client=capturing_client(sink))
    )
    yield "anthropic", AnthropicModel(
        "claude-sonnet-4-5", provider=AnthropicProvider(api_key="test", http_client=capturing_client(sink))
    )
    yield "gemini", GoogleModel(
        "gemini-2.5-flash", provider=GoogleProvider(api_key="test", http_client=capturing_client(sink))
    )


FIELDS = {
    "openai-chat": ["messages"],
    "openai-responses": ["instructions", "input"],
    "anthropic": ["system", "messages"],
    "gemini": ["systemInstruction", "contents"],
}


def get(api: str, path: str) -> dict:
    with urllib.request.urlopen(f"{api.rstrip('/')}{path}", timeout=10) as resp:
        return json.load(resp)


async def capture(history) -> dict:
    out: dict[str, dict] = {}
    for name, model in models(sink := []):
        sink.clear()
        try:
            await model.request(history, None, ModelRequestParameters())
        except Exception:  # noqa: BLE001 - the transport always aborts; only the capture matters
            pass
        if not sink:
            raise SystemExit(f"{name}: the model sent no request")
        body = sink[-1]
        out[name] = {f: body.get(f) for f in FIELDS[name]}
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--api", required=True)
    parser.add_argument("--run-id", required=True)
    args = parser.parse_args()
    run = urllib.parse.quote(args.run_id, safe="")
    result: dict[str, dict] = {}
    for snap in get(args.api, f"/v1/runs/{run}/snapshots")["snapshots"]:
        seq = snap["seq"]
        query = f"format=pydantic-ai&at={seq}"
        if snap["state"] != "complete":
            query += "&repair=true"
        body = get(args.api, f"/v1/runs/{run}/continuation?{query}")
        history = ModelMessagesTypeAdapter.validate_python(body["messages"])
        result[str(seq)] = asyncio.run(capture(history))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
