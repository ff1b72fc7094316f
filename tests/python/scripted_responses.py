"""The body of a scripted OpenAI Responses API answer, for the OpenAI Agents scenarios' mock transports."""

from __future__ import annotations

from typing import Any


def response(response_id: str, instructions: Any, output: list[dict[str, Any]]) -> dict[str, Any]:
    """A completed response with `output`; like the real API it echoes the request's instructions."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": 1,
        "model": "gpt-scripted",
        "status": "completed",
        "instructions": instructions,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 10,
            "output_tokens": 5,
            "total_tokens": 15,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }
