"""MCP overhead: one tool call through an MCP server (stdio and streamable HTTP) vs the built-in calculator, and
the latency of one ``solve`` call on ``streamgrpo serve`` (stdio, no broker, SmolLM2 unless --model).

    python bench/bench_mcp.py --calls 200            # tool-call overhead only
    python bench/bench_mcp.py --calls 200 --solve 3  # plus solve latency (loads the model in a subprocess)

Medians in milliseconds; the MCP server is tests/fixtures/mcp_tools_server.py (its `add` does the same work as
`calculator` on "2+3": none worth measuring), so the difference is the protocol and transport round trip.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def _median_ms(fn, n: int) -> float:  # type: ignore[no-untyped-def]
    fn()  # warm-up
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def tool_calls(n: int) -> dict[str, float]:
    from support.mcp_servers import http_server, stdio_server

    from streamgrpo.rollout.tools import build_tools, call_tool
    from streamgrpo.rollout.tools.config import McpServerSettings, ToolsSettings

    out: dict[str, float] = {}
    builtin = build_tools(["calculator"], ToolsSettings())
    out["calculator (built-in)"] = _median_ms(lambda: call_tool(builtin, "calculator", "2+3"), n)
    stdio = build_tools([], ToolsSettings(mcp_servers=[stdio_server("fx", tools=["add"])]))
    out["fx.add (MCP stdio)"] = _median_ms(lambda: call_tool(stdio, "fx.add", '{"a": 2, "b": 3}'), n)
    stdio["fx.add"].hub.close()  # type: ignore[attr-defined]
    with http_server() as url:
        web = build_tools([], ToolsSettings(mcp_servers=[McpServerSettings(name="web", url=url, tools=["add"])]))
        out["web.add (MCP HTTP)"] = _median_ms(lambda: call_tool(web, "web.add", '{"a": 2, "b": 3}'), n)
        web["web.add"].hub.close()  # type: ignore[attr-defined]
    return out


async def solve_latency(n: int, model: str | None) -> list[float]:
    from mcp import Client, StdioServerParameters

    args = ["-m", "streamgrpo.cli", "serve", "--no-broker"] + (["--model", model] if model else [])
    times = []
    async with Client(StdioServerParameters(command=sys.executable, args=args)) as client:
        for i in range(n + 1):
            t = time.perf_counter()
            await client.call_tool("solve", {"question": f"What is {i + 12} times 3?"}, read_timeout_seconds=600)
            if i:  # the first call warms up
                times.append((time.perf_counter() - t) * 1000)
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--solve", type=int, default=0, help="solve calls to time (0: skip)")
    ap.add_argument("--model", default=None)
    args = ap.parse_args()
    calls = tool_calls(args.calls)
    rows = [f"| {name} | {ms:.2f} |" for name, ms in calls.items()]
    result: dict[str, object] = {"calls": args.calls, "solve_calls": args.solve, "tool_call_ms": calls}
    for name, ms in calls.items():
        print(f"{name:28s} median {ms:8.2f} ms over {args.calls} calls")
    if args.solve:
        times = asyncio.run(solve_latency(args.solve, args.model))
        result["solve_ms"] = {"median": statistics.median(times), "min": min(times), "max": max(times), "n": len(times)}
        print(f"{'solve (serve, stdio)':28s} median {statistics.median(times):8.0f} ms over {len(times)} calls "
              f"(min {min(times):.0f}, max {max(times):.0f})")
        rows.append(f"| solve on `streamgrpo serve` (stdio, no broker; {len(times)} calls: "
                    f"{min(times):,.0f}-{max(times):,.0f}) | {statistics.median(times):,.0f} |")
    result["table"] = "\n".join(["| call | median ms |", "|---|---|", *rows])
    print(json.dumps(result))  # the last line: bench/run_all.py reads it


if __name__ == "__main__":
    main()
