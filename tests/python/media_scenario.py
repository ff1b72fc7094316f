"""A real Pydantic AI agent run with a large image in the user prompt, exported to stepline over OTLP.

The user prompt is a text plus a `BinaryContent` image of --size bytes (deterministic bytes behind a PNG
signature). The agent (FunctionModel, no network model) calls one tool, then answers, so the image is sent
in two model requests and in the run's final history.

Prints exactly one JSON line on stdout:
  {"run_id", "image_base64", "image_sha256", "all_messages", "export": {...}}
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import random
import sys

from otlp_setup import install_tracer_provider
from pydantic_ai import Agent, BinaryContent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel


def image_bytes(size: int) -> bytes:
    signature = b"\x89PNG\r\n\x1a\n"
    rng = random.Random(20261122)
    return signature + bytes(rng.getrandbits(8) for _ in range(size - len(signature)))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True, help="OTLP/HTTP receiver base URL")
    parser.add_argument("--size", type=int, default=96 * 1024, help="image size in bytes")
    args = parser.parse_args()

    provider, exporter = install_tracer_provider("http", args.endpoint, "stepline-e2e-media")
    Agent.instrument_all(True)

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if sum(1 for m in messages if m.kind == "response") == 0:
            return ModelResponse(parts=[ToolCallPart("zoom", {"factor": 2}, tool_call_id="call_z1")])
        return ModelResponse(parts=[TextPart("A cat, zoomed in.")])

    agent = Agent(FunctionModel(model), name="viewer", instructions="You describe images.")

    @agent.tool_plain
    def zoom(factor: int) -> str:
        return f"zoomed x{factor}"

    image = image_bytes(args.size)
    result = agent.run_sync(["What is in this picture?", BinaryContent(data=image, media_type="image/png")])

    flushed = provider.force_flush(30_000)
    provider.shutdown()
    stats = exporter.stats()
    stats["flushed"] = bool(flushed)
    print(
        json.dumps(
            {
                "run_id": result.run_id,
                "image_base64": base64.b64encode(image).decode("ascii"),
                "image_sha256": hashlib.sha256(image).hexdigest(),
                "all_messages": json.loads(result.all_messages_json()),
                "export": stats,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
