"""The README's agent loops run as written, with the vendors' own SDKs, against a real deployment.

The model calls go to a scripted server (tests/support/model_server.py) instead of the vendors:
the only change to each snippet is where its SDK client points.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.model_server import call, model_server, say
from tests.support.stack import ROOT, Stack

README = (ROOT / "README.md").read_text()


def snippet(after: str) -> str:
    """The first python block after the line containing ``after``."""
    rest = README[README.index(after):]
    match = re.search(r"```python\n(.*?)```", rest, re.S)
    assert match is not None, after
    return match.group(1)


def run_snippet(code: str, stack: Stack, cwd: Path) -> str:
    (cwd / ".toolrelay").mkdir(exist_ok=True)
    (cwd / ".toolrelay" / "api-key").write_text(stack.api_key + "\n")
    code = code.replace("http://127.0.0.1:8000", stack.base_url)
    result = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_openai_sdk_loop(stack: Stack, tmp_path: Path) -> None:
    with model_server() as models:
        models.script("gpt-4.1-mini", call(("call_1", "calculate", {"expression": "17 * 23"}),
                                           ("call_2", "current_time", {"timezone": "Asia/Tokyo"})),
                      say("17 * 23 is 391."))
        code = snippet("An agent loop with the OpenAI SDK")
        code = code.replace("model = OpenAI()", f"model = OpenAI(base_url={models.url!r}, api_key='sk-test')")
        assert run_snippet(code, stack, tmp_path) == "17 * 23 is 391."
        second = models.requests_for("gpt-4.1-mini")[1]
        told = [m for m in second.messages if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in told] == ["call_1", "call_2"]
        assert told[0]["content"].startswith('{"result": 391}')


def test_the_anthropic_sdk_loop(stack: Stack, tmp_path: Path) -> None:
    with model_server() as models:
        models.script("claude-sonnet-4-5", call(("toolu_1", "calculate", {"expression": "17 * 23"})),
                      say("It is 391."))
        code = snippet("An agent loop with the OpenAI SDK").split("model = OpenAI()")[0]  # the toolrelay client
        code += snippet("The same with the Anthropic SDK")
        code = code.replace("model = anthropic.Anthropic()",
                            f"model = anthropic.Anthropic(base_url={models.url.removesuffix('/v1')!r}, api_key='x')")
        assert run_snippet(code, stack, tmp_path) == "It is 391."
        second = models.requests_for("claude-sonnet-4-5")[1]
        results = second.messages[-1]
        assert results["role"] == "user"
        assert [(b["type"], b["tool_use_id"], b["is_error"]) for b in results["content"]] == [
            ("tool_result", "toolu_1", False)]
