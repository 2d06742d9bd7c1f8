"""querygate against the official MCP Python SDK's streamable HTTP client.

Usage: python3 tests/python/mcp_client.py http://127.0.0.1:<port>/mcp
       python3 tests/python/mcp_client.py https://127.0.0.1:<port>/mcp CA_PEM CERT_PEM KEY_PEM

With a CA and a client certificate and key, the client speaks HTTPS, trusting only that CA
and presenting the certificate (mTLS).

Lists the tools, calls run_select_query with SELECT 1 AS n, 'ok' AS status and checks the
structured result and the markdown text, then searches and gets a query library entry (the
SDK checks structured content against each tool's outputSchema). Prints one line per check; exits non-zero on any
failure.
"""

import asyncio
import ssl
import sys

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


async def main(url: str, tls: list[str]) -> None:
    http_client = None
    if tls:
        ca, cert, key = tls
        context = ssl.create_default_context(cafile=ca)
        context.load_cert_chain(cert, key)
        http_client = httpx2.AsyncClient(
            verify=context, timeout=httpx2.Timeout(30.0, read=300.0)
        )
    async with streamable_http_client(url, http_client=http_client) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            print(f"initialized: protocol {init.protocol_version}, server {init.server_info.name}")
            assert init.server_info.name == "querygate", init.server_info

            tools = await session.list_tools()
            names = [tool.name for tool in tools.tools]
            print(f"tools: {', '.join(names)}")
            for expected in ("server_info", "run_select_query"):
                assert expected in names, names

            result = await session.call_tool(
                "run_select_query", {"sql": "SELECT 1 AS n, 'ok' AS status"}
            )
            assert not result.is_error, result
            structured = result.structured_content
            print(f"structured: {structured}")
            assert structured == {"rows": [{"n": 1, "status": "ok"}]}, structured
            text = "\n".join(block.text for block in result.content if block.type == "text")
            print(f"text: {text!r}")
            assert "| n | status |" in text, text
            assert "| 1 | ok |" in text, text

            search = await session.call_tool(
                "query_library_search", {"intent": "repositories of a github org"}
            )
            assert not search.is_error, search
            hit = search.structured_content["hits"][0]["id"]
            print(f"library search: {hit}")
            entry = await session.call_tool("query_library_get", {"id": hit})
            assert not entry.is_error, entry
            print(f"library get: {entry.structured_content['next_tool']}")

            failed = await session.call_tool(
                "run_select_query", {"sql": "SELECT id FROM nosuch.a.b"}
            )
            assert failed.is_error, failed
            print(f"tool error: {failed.structured_content['error']['code']}")
    print("python mcp client: ok")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 5):
        sys.exit("usage: mcp_client.py <url> [<ca.pem> <cert.pem> <key.pem>]")
    asyncio.run(main(sys.argv[1], sys.argv[2:]))
