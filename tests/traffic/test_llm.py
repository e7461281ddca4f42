"""The LLM stub speaks OpenAI's protocol as the official client parses it (the client upstream's agent
uses), JSON and streamed, and does per profile what it is told: latency, errors, a hang until
released, one tool call."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest

from tests.traffic.llm import LLMStub, model_for, reply_for


@pytest.fixture
def stub():
    with LLMStub(("alpha", "beta")) as s:
        yield s


def client(stub: LLMStub) -> openai.OpenAI:
    return openai.OpenAI(base_url=stub.url, api_key="unused", max_retries=0, timeout=10)


def ask(stub: LLMStub, profile: str, prompt: str, stream: bool = False, **kw):
    c = client(stub)
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": prompt}]
    if not stream:
        return c.chat.completions.create(model=model_for(profile), messages=msgs, **kw)
    chunks = list(c.chat.completions.create(model=model_for(profile), messages=msgs, stream=True,
                                            stream_options={"include_usage": True}, **kw))
    return chunks


def test_json_and_streamed_answers_are_the_deterministic_reply(stub):
    r = ask(stub, "alpha", "hello there")
    assert r.choices[0].message.content == reply_for("alpha", "hello there")
    assert r.choices[0].finish_reason == "stop"
    chunks = ask(stub, "beta", "hello there", stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == reply_for("beta", "hello there") != reply_for("alpha", "hello there")
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
    assert [c.kind for c in stub.calls("alpha")] == ["completion"]


def test_models_list_and_probes(stub):
    models = client(stub).models.list()
    assert {m.id for m in models.data} == {model_for("alpha"), model_for("beta")}
    with urllib.request.urlopen(f"{stub.url}/models/{model_for('beta')}", timeout=5) as resp:
        assert json.loads(resp.read())["id"] == model_for("beta")
    req = urllib.request.Request(f"http://127.0.0.1:{stub.port}/api/show", data=b'{"name": "stub-beta"}',
                                 method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 404
    assert [c.kind for c in stub.calls("beta")] == ["probe", "probe"]
    since = time.monotonic()
    ask(stub, "beta", "x")
    contacts = stub.contacts("beta", since)
    assert contacts["first_call"] == contacts["first_completion"] is not None


def test_latency_and_errors_are_per_profile(stub):
    stub.behave("beta", delay=3.0)
    done: list[str] = []
    t = time.monotonic()
    slow = threading.Thread(target=lambda: done.append(ask(stub, "beta", "b").choices[0].message.content))
    slow.start()
    done.append(ask(stub, "alpha", "a").choices[0].message.content)  # not held behind beta's delay
    slow.join(30)
    assert time.monotonic() - t >= 3.0  # a lower bound: true at any load
    assert done == [reply_for("alpha", "a"), reply_for("beta", "b")]
    stub.behave("beta", delay=0.0, error=503)
    with pytest.raises(openai.APIStatusError) as e:
        ask(stub, "beta", "b")
    assert e.value.status_code == 503
    assert ask(stub, "alpha", "a").choices[0].message.content == reply_for("alpha", "a")
    stub.reset("beta")
    assert ask(stub, "beta", "b").choices[0].message.content == reply_for("beta", "b")


def test_a_hang_holds_calls_until_released(stub):
    stub.behave("beta", hang=True)
    got: list[str] = []
    t = threading.Thread(target=lambda: got.append(ask(stub, "beta", "held").choices[0].message.content))
    t.start()
    assert ask(stub, "alpha", "free").choices[0].message.content == reply_for("alpha", "free")
    t.join(0.5)
    assert t.is_alive() and not got  # still held while alpha answers
    stub.release("beta")
    t.join(5)
    assert got == [reply_for("beta", "held")]


def test_an_armed_tool_call_is_answered_once_then_text(stub):
    stub.arm_tool("beta", "echo hi", timeout=30)
    for stream in (True, False):
        if not stream:
            stub.arm_tool("beta", "echo hi", timeout=30)
        tools = [{"type": "function", "function": {"name": "terminal", "parameters": {"type": "object"}}}]
        if stream:
            chunks = ask(stub, "beta", "run it", stream=True, tools=tools)
            calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
            finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        else:
            r = ask(stub, "beta", "run it", tools=tools)
            calls, finish = r.choices[0].message.tool_calls, r.choices[0].finish_reason
        assert finish == "tool_calls" and len(calls) == 1
        assert calls[0].function.name == "terminal"
        assert json.loads(calls[0].function.arguments) == {"command": "echo hi", "timeout": 30}
    # Disarmed: the turn after the tool's result, and the next user turn, get text.
    c = client(stub)
    msgs = [{"role": "user", "content": "run it"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "hi"}]
    r = c.chat.completions.create(model=model_for("beta"), messages=msgs)
    assert r.choices[0].message.content == reply_for("beta", "run it")
    assert ask(stub, "beta", "again").choices[0].message.content == reply_for("beta", "again")
    assert [c.kind for c in stub.calls("beta")].count("tool_call") == 2


def test_close_answers_held_calls_and_stops(stub):
    stub.behave("alpha", hang=True)
    errors: list[BaseException] = []

    def held():
        try:
            ask(stub, "alpha", "x")
        except Exception as e:
            errors.append(e)

    t = threading.Thread(target=held)
    t.start()
    time.sleep(0.2)
    stub.close()
    t.join(5)
    assert not t.is_alive()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{stub.url}/models", timeout=2)
