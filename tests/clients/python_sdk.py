"""One MCP client of the approval matrix: the official Python SDK 2.x (`mcp` 2.3).

Usage: python python_sdk.py MODE URL TOKEN SQL...
       python python_sdk.py replay URL_A URL_B URL_C TOKEN SQL
  MODE  2026-07-28: the SDK's `Client` discovers the modern protocol and answers the
        approval prompt (MRTR: `input_required` with an elicitation, retried by the SDK) in
        its elicitation callback; legacy: the initialize handshake (2025-11-25), approved
        out of band while the call waits.
For each SQL it calls run_mutation_query once through the SDK and prints one line,
`RESULT ok <text>` or `RESULT error <text>`. The elicitation callback decides from the SQL
in the prompt: `-approve` is accepted the first time it is seen (declined when asked again,
the replay), `-deny` declined, `-timeout` answered after the approval's ttl (APPROVAL_TTL
seconds, default 4).

`replay` drives the multi-round trip by hand through the SDK's session
(`allow_input_required=True`): the call on URL_A is answered `accept` and runs; then the very
same answer and `requestState` are sent again to URL_B and URL_C (other replicas), as a
replaying client would. One `RESULT` line per attempt.
"""

import asyncio
import json
import os
import sys

import httpx2
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client

seen: set[str] = set()


async def elicit(_context, params):
    message = params.message
    marker = next((m for m in ("-approve", "-deny", "-timeout") if m in message), None)
    print(f"ASKED {marker}", flush=True)
    if marker == "-approve" and message not in seen:
        seen.add(message)
        return types.ElicitResult(action="accept", content={})
    if marker == "-timeout":
        await asyncio.sleep(float(os.environ.get("APPROVAL_TTL", "4")) + 1.5)
        return types.ElicitResult(action="accept", content={})
    return types.ElicitResult(action="decline")


def describe(result) -> str:
    text = " ".join(b.text for b in result.content if getattr(b, "type", "") == "text")
    return f"{json.dumps(result.structured_content)} {text}"


async def main(mode: str, url: str, token: str, statements: list[str]) -> None:
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30.0, read=120.0)
    )
    transport = streamable_http_client(url, http_client=http)
    async with Client(transport, mode=mode, elicitation_callback=elicit) as client:
        print(f"PROTOCOL {client.session.protocol_version}", flush=True)
        for sql in statements:
            result = await client.call_tool("run_mutation_query", {"sql": sql})
            outcome = "error" if result.is_error else "ok"
            print(f"RESULT {outcome} {describe(result)}", flush=True)


def client(url: str, token: str) -> Client:
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30.0, read=120.0)
    )
    return Client(
        streamable_http_client(url, http_client=http), mode="2026-07-28", elicitation_callback=elicit
    )


async def replay(urls: list[str], token: str, sql: str) -> None:
    arguments = {"sql": sql}
    async with client(urls[0], token) as first:
        asked = await first.session.call_tool("run_mutation_query", arguments, allow_input_required=True)
        assert isinstance(asked, types.InputRequiredResult), asked
        answers = {key: types.ElicitResult(action="accept", content={}) for key in asked.input_requests or {}}
        state = asked.request_state
        ran = await first.session.call_tool(
            "run_mutation_query", arguments, input_responses=answers, request_state=state
        )
        print(f"RESULT {'error' if ran.is_error else 'ok'} {describe(ran)}", flush=True)
    for url in urls[1:]:
        async with client(url, token) as other:
            again = await other.session.call_tool(
                "run_mutation_query", arguments, input_responses=answers, request_state=state,
                allow_input_required=True,
            )
            if isinstance(again, types.InputRequiredResult):
                print("RESULT error asked again (input_required)", flush=True)
            else:
                print(f"RESULT {'error' if again.is_error else 'ok'} {describe(again)}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "replay":
        asyncio.run(replay(sys.argv[2:5], sys.argv[5], sys.argv[6]))
        sys.exit(0)
    if len(sys.argv) < 5:
        sys.exit("usage: python_sdk.py MODE URL TOKEN SQL...")
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]))
