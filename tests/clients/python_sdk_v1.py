"""One MCP client of the approval matrix: the official Python SDK 1.x (`mcp` 1.30), its
streamable HTTP client and `ClientSession` (MCP 2025-11-25, approved out of band while the
call waits).

Usage: python python_sdk_v1.py URL TOKEN SQL...
Prints `RESULT ok <text>` or `RESULT error <text>` per SQL (run_mutation_query).
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client


async def main(url: str, token: str, statements: list[str]) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with streamablehttp_client(url, headers=headers, sse_read_timeout=120) as (read, write, _):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            print(f"PROTOCOL {init.protocolVersion}", flush=True)
            for sql in statements:
                result = await session.call_tool("run_mutation_query", {"sql": sql})
                text = " ".join(b.text for b in result.content if b.type == "text")
                outcome = "error" if result.isError else "ok"
                print(f"RESULT {outcome} {json.dumps(result.structuredContent)} {text}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit("usage: python_sdk_v1.py URL TOKEN SQL...")
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
