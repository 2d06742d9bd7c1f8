"""One MCP client of the approval matrix: the OpenAI Agents SDK (`openai-agents` 0.24), its
`MCPServerStreamableHttp` (no elicitation: approved out of band while the call waits). No
model is involved: the tool is called through the server object, as the agent's runner does.

Usage: python openai_agents.py URL TOKEN SQL...
Prints `RESULT ok <text>` or `RESULT error <text>` per SQL (run_mutation_query).
"""

import asyncio
import json
import sys

from agents.mcp import MCPServerStreamableHttp


async def main(url: str, token: str, statements: list[str]) -> None:
    server = MCPServerStreamableHttp(
        params={
            "url": url,
            "headers": {"Authorization": f"Bearer {token}"},
            "timeout": 30,
            "sse_read_timeout": 120,
        },
        client_session_timeout_seconds=120,
        name="querygate",
    )
    async with server:
        tools = [tool.name for tool in await server.list_tools()]
        assert "run_mutation_query" in tools, tools
        print("PROTOCOL agents", flush=True)
        for sql in statements:
            result = await server.call_tool("run_mutation_query", {"sql": sql})
            text = " ".join(b.text for b in result.content if b.type == "text")
            outcome = "error" if result.isError else "ok"
            print(f"RESULT {outcome} {json.dumps(result.structuredContent)} {text}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit("usage: openai_agents.py URL TOKEN SQL...")
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
