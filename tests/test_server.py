"""The OpenAI-compatible server (app/server), on loopback, through OpenAI's own Python client and raw HTTP.

A real model (SmolLM2-135M) runs on the server's engine thread; nothing of the engine is mocked."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")

from app.engine.pair_config import PairConfig  # noqa: E402
from app.engine.session import GenParams, SpecSession  # noqa: E402
from app.models.recommended_sampling import SamplingValues  # noqa: E402
from app.server.api import ApiConfig, asgi_app  # noqa: E402
from app.server.engine_thread import EngineThread  # noqa: E402
from app.server.runner import ServerThread  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODEL = "specchat"


@dataclass
class Running:
    engine: EngineThread
    server: ServerThread

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.address.port}/v1"

    def client(self, **kw: Any) -> Any:
        return openai.OpenAI(base_url=self.url, api_key=kw.pop("api_key", "unused"), max_retries=0, timeout=120, **kw)


def start(model: Path, *, mode: str = "lookup", n_ctx: int = 1024, host: str = "127.0.0.1", max_queue: int = 16,
          api_key: str | None = None, max_body: int = 8 << 20, strict: bool = False) -> Running:
    """strict: no CPU repacking, so a verify batch rounds as one-token steps do (greedy replies then equal whatever
    is drafted, bit for bit; with repacking a near-tie may flip, docs/BENCHMARKS.md)."""
    config = PairConfig(model, None, n_ctx=n_ctx, n_threads=2, repack=not strict)
    engine = EngineThread(lambda: SpecSession(config), mode, max_queue)
    assert engine.wait_ready(300), engine.load_error
    config = ApiConfig(GenParams(mode=mode), SamplingValues(), api_key=api_key, max_body_bytes=max_body)
    return Running(engine, ServerThread(asgi_app(engine, config), host, 0).start())


@pytest.fixture(scope="module")
def served(smol_path: Path) -> Iterator[Running]:
    running = start(smol_path)
    yield running
    running.server.stop()
    running.engine.close()


def _raw(url: str, body: bytes | str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any], Any]:
    data = body.encode() if isinstance(body, str) else body
    request = urllib.request.Request(url, data, {"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


def _chat(**kw: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 8, **kw}


# --- the endpoints ------------------------------------------------------------------------------------------------

def test_models_and_health(served: Running, smol_path: Path) -> None:
    client = served.client()
    [card] = client.models.list().data
    assert card.id == smol_path.stem and card.owned_by == "specchat"
    assert client.models.retrieve(smol_path.stem).id == card.id
    with urllib.request.urlopen(served.url.removesuffix("/v1") + "/health", timeout=10) as response:
        assert json.loads(response.read())["status"] == "ok"


def test_chat_greedy_is_the_engines_own_reply(served: Running, smol_path: Path) -> None:
    """The server's greedy reply is what the engine writes for the same chat, with usage and SpecChat's figures."""
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is a river?"}]
    reply = served.client().chat.completions.create(model=MODEL, messages=messages, max_tokens=24, temperature=0)
    with SpecSession(PairConfig(smol_path, None, n_ctx=1024, n_threads=2)) as session:
        prompt = session.chat_prompt(messages)
        [finish] = [e for e in session.generate(prompt, GenParams("lookup", 24)) if type(e).__name__ == "FinishEvent"]
    assert reply.choices[0].message.content == finish.text and reply.choices[0].message.role == "assistant"
    assert reply.object == "chat.completion" and reply.id.startswith("chatcmpl-")
    assert reply.usage.prompt_tokens == len(prompt) and reply.usage.completion_tokens == len(finish.tokens)
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert reply.choices[0].finish_reason == ("length" if len(finish.tokens) == 24 else "stop")
    extra = reply.model_extra
    assert extra["specchat"]["mode"] == "lookup" and extra["specchat"]["steps"] >= 1
    assert extra["timings"]["predicted_n"] == len(finish.tokens)


def test_streaming_chat_gives_the_same_text_with_usage_last(served: Running) -> None:
    client = served.client()
    kw = {"model": MODEL, "messages": [{"role": "user", "content": "Count from one to ten in words."}],
          "max_tokens": 30, "temperature": 0}
    whole = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finished = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finished] == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])
    # The prompt was just processed: the second request found it in the target's cache.
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens >= whole.usage.prompt_tokens - 1


def test_a_request_sharing_a_prompt_start_reuses_its_cache(served: Running) -> None:
    """An editor sends the same long file with another instruction: the file's tokens come from the cache."""
    client = served.client()
    system = {"role": "system", "content": "You review this file:\n" + "def f(x):\n    return x * 2\n" * 20}
    first = client.chat.completions.create(model=MODEL, max_tokens=4, temperature=0,
                                           messages=[system, {"role": "user", "content": "Is it correct?"}])
    second = client.chat.completions.create(model=MODEL, max_tokens=4, temperature=0,
                                            messages=[system, {"role": "user", "content": "Name one flaw."}])
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert first.usage.prompt_tokens > 200 and cached >= first.usage.prompt_tokens - 20, (first.usage, second.usage)
    assert cached < second.usage.prompt_tokens  # the new instruction was processed


def test_no_cors_headers_unless_an_origin_is_allowed(served: Running, smol_path: Path) -> None:
    def preflight(url: str) -> dict[str, str]:
        request = urllib.request.Request(url + "/chat/completions", method="OPTIONS", headers={
            "Origin": "https://example.org", "Access-Control-Request-Method": "POST"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return {k.lower(): v for k, v in response.headers.items()}
        except urllib.error.HTTPError as error:
            return {k.lower(): v for k, v in error.headers.items()}

    assert "access-control-allow-origin" not in preflight(served.url)
    engine = served.engine
    config = ApiConfig(GenParams(mode="lookup"), SamplingValues(), cors_origins=("https://example.org",))
    allowed = ServerThread(asgi_app(engine, config), "127.0.0.1", 0).start()
    try:
        headers = preflight(f"http://127.0.0.1:{allowed.address.port}/v1")
        assert headers.get("access-control-allow-origin") == "https://example.org"
    finally:
        allowed.stop()


def test_completions_streaming_and_not(served: Running) -> None:
    client = served.client()
    kw = {"model": MODEL, "prompt": "The days of the week are Monday, Tuesday,", "max_tokens": 12, "temperature": 0}
    whole = client.completions.create(**kw)
    assert whole.object == "text_completion" and whole.choices[0].text
    streamed = "".join(c.choices[0].text for c in client.completions.create(**kw, stream=True) if c.choices)
    assert streamed == whole.choices[0].text
    assert whole.usage.completion_tokens == 12 and whole.choices[0].finish_reason == "length"


def test_stop_sequences_end_the_reply_before_them(served: Running) -> None:
    client = served.client()
    kw = {"model": MODEL, "prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9,", "max_tokens": 30, "temperature": 0}
    full = client.completions.create(**kw).choices[0].text
    assert " 13" in full, full  # the model counts on; the stop sequence below is in its reply
    cut = client.completions.create(**kw, stop=[" 13", "never"])
    assert cut.choices[0].text == full[:full.index(" 13")] and cut.choices[0].finish_reason == "stop"
    assert cut.usage.completion_tokens < 30
    streamed = "".join(c.choices[0].text for c in client.completions.create(**kw, stop=" 13", stream=True)
                       if c.choices)
    assert streamed == cut.choices[0].text


def test_a_seed_repeats_a_sampled_reply(served: Running) -> None:
    client = served.client()
    kw = {"model": MODEL, "messages": [{"role": "user", "content": "Write a short poem about the sea."}],
          "max_tokens": 24, "temperature": 1.0, "top_p": 1.0}
    first = client.chat.completions.create(**kw, seed=1234).choices[0].message.content
    again = client.chat.completions.create(**kw, seed=1234).choices[0].message.content
    others = {client.chat.completions.create(**kw, seed=s).choices[0].message.content for s in (7, 8, 9)}
    assert first == again
    assert len(others | {first}) > 1  # the seed decides the sample: other seeds write other replies


# --- Predicted Outputs -------------------------------------------------------------------------------------------

SOURCE = """def total(prices):
    result = 0
    for price in prices:
        result += price
    return result


def average(prices):
    if not prices:
        return 0
    return total(prices) / len(prices)
"""


@pytest.fixture(scope="module")
def strict_served(smol_path: Path) -> Iterator[Running]:
    running = start(smol_path, strict=True, n_ctx=1024)
    yield running
    running.server.stop()
    running.engine.close()


@pytest.mark.parametrize("mode", ["lookup", "none"])
def test_a_prediction_changes_the_speed_never_the_reply(strict_served: Running, mode: str) -> None:
    """A right prediction: the same greedy reply, most of it accepted from the prediction and counted in usage; a
    prediction wrong everywhere: the same reply, nothing accepted from it. In mode none (plain) too."""
    strict_served.engine.served = replace(strict_served.engine.served, mode=mode)  # type: ignore[arg-type]
    client = strict_served.client()
    kw = {"model": MODEL, "temperature": 0, "max_tokens": 64, "messages": [
        {"role": "user", "content": "Repeat this Python code exactly, then stop:\n\n" + SOURCE}]}
    plain = client.chat.completions.create(**kw)
    text = plain.choices[0].message.content
    assert plain.usage.completion_tokens_details.accepted_prediction_tokens == 0
    right = client.chat.completions.create(**kw, prediction={"type": "content", "content": text})
    assert right.choices[0].message.content == text
    details = right.usage.completion_tokens_details
    assert details.accepted_prediction_tokens >= 0.6 * right.usage.completion_tokens, right.usage
    assert right.model_extra["specchat"]["accepted_prediction_tokens"] == details.accepted_prediction_tokens
    assert right.model_extra["specchat"]["prediction_tokens"] > 0
    wrong = client.chat.completions.create(**kw, prediction={
        "type": "content", "content": "Les sanglots longs des violons de l'automne blessent mon coeur. " * 6})
    assert wrong.choices[0].message.content == text
    assert wrong.usage.completion_tokens_details.accepted_prediction_tokens == 0


def test_a_seeded_sample_is_the_same_with_a_prediction(strict_served: Running) -> None:
    client = strict_served.client()
    kw = {"model": MODEL, "temperature": 0.9, "top_p": 1.0, "seed": 77, "max_tokens": 48,
          "messages": [{"role": "user", "content": "Repeat this Python code:\n\n" + SOURCE}]}
    alone = client.chat.completions.create(**kw).choices[0].message.content
    streamed = client.chat.completions.create(**kw, stream=True, prediction={"type": "content", "content": SOURCE})
    with_prediction = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert with_prediction == alone


# --- bad input ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("body", "status", "param", "code"), [
    ("{not json", 400, None, "invalid_json"),
    ("[1, 2]", 400, None, "invalid_request"),
    (json.dumps({"messages": [{"role": "user", "content": "hi"}]}), 400, "model", "missing_required_parameter"),
    (json.dumps(_chat(model="gpt-4o")), 404, "model", "model_not_found"),
    (json.dumps(_chat(messages=[])), 400, "messages", "invalid_value"),
    (json.dumps(_chat(messages=[{"role": "user", "content": 5}])), 400, "messages[0].content", "invalid_type"),
    (json.dumps(_chat(messages=[{"role": "wizard", "content": "hi"}])), 400, "messages[0].role", "invalid_value"),
    (json.dumps(_chat(temperature="hot")), 400, "temperature", "invalid_type"),
    (json.dumps(_chat(temperature=3)), 400, "temperature", "invalid_value"),
    (json.dumps(_chat(max_tokens=0)), 400, "max_tokens", "invalid_value"),
    (json.dumps(_chat(top_p=0)), 400, "top_p", "invalid_value"),
    (json.dumps(_chat(stop=["a", "b", "c", "d", "e"])), 400, "stop", "invalid_value"),
    (json.dumps(_chat(n=2)), 400, "n", "unsupported_parameter"),
    (json.dumps(_chat(tools=[{"type": "function", "function": {"name": "f"}}])), 400, "tools",
     "unsupported_parameter"),
    (json.dumps(_chat(prediction={"type": "image", "content": "x"})), 400, "prediction.type", "invalid_value"),
    (json.dumps(_chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])),
     400, "messages[0].content[0].type", "unsupported_content"),
    (json.dumps(_chat(messages=[{"role": "user", "content": "word " * 3000}])), 400, "messages",
     "context_length_exceeded"),
    (json.dumps(_chat(max_tokens=5000)), 400, "max_tokens", "context_length_exceeded"),
])
def test_bad_input_gets_an_openai_shaped_error_naming_the_field(served: Running, body: str, status: int,
                                                                 param: str | None, code: str) -> None:
    got, _headers, payload = _raw(served.url + "/chat/completions", body)
    assert got == status, payload
    error = payload["error"]
    assert error["param"] == param and error["code"] == code, error
    assert error["message"] and error["type"]
    if param:
        assert param.split("[")[0].split(".")[0] in error["message"]


def test_the_openai_client_raises_its_own_error_types(served: Running) -> None:
    client = served.client()
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], temperature=9)
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model=MODEL, input="hi")


def test_a_body_over_the_limit_is_refused(smol_path: Path) -> None:
    running = start(smol_path, max_body=64 << 10, n_ctx=256)
    try:
        got, _headers, payload = _raw(running.url + "/chat/completions", json.dumps(_chat(
            messages=[{"role": "user", "content": "x" * (100 << 10)}])))
        assert got == 413 and payload["error"]["code"] == "request_too_large"
        assert running.client().chat.completions.create(**_chat()).choices[0].message.content  # still serving
    finally:
        running.server.stop()
        running.engine.close()


# --- safety, disconnects, load ------------------------------------------------------------------------------------

def test_a_key_is_required_on_any_other_address_and_then_checked(smol_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "app.cli", "serve", "-m", str(smol_path), "--host", "0.0.0.0",
                           "--port", "0"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SPECCHAT_API_KEY": ""})
    assert done.returncode == 2 and "without an API key" in done.stderr and "--api-key" in done.stderr
    running = start(smol_path, host="0.0.0.0", api_key="sesame", n_ctx=256)
    try:
        with pytest.raises(openai.AuthenticationError, match="Bearer"):
            running.client(api_key="wrong").models.list()
        got, headers, payload = _raw(running.url + "/chat/completions", json.dumps(_chat()))
        assert got == 401 and payload["error"]["code"] == "invalid_api_key" and "Bearer" in headers.get(
            "www-authenticate", headers.get("WWW-Authenticate", ""))
        assert running.client(api_key="sesame").chat.completions.create(**_chat()).choices[0].message.content
    finally:
        running.server.stop()
        running.engine.close()


def test_a_client_that_leaves_mid_stream_cancels_its_generation(served: Running) -> None:
    client = served.client()
    stream = client.chat.completions.create(
        model=MODEL, max_tokens=400, temperature=0, stream=True,
        messages=[{"role": "user", "content": "Write a long story about a lighthouse keeper."}])
    for n, _chunk in enumerate(stream):
        if n == 4:
            break
    stream.close()  # the connection goes
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and served.engine.pending:
        time.sleep(0.1)
    job_id, reason, n_tokens = served.engine.recent[-1]
    assert reason == "cancelled" and n_tokens < 400, served.engine.recent
    assert served.client().chat.completions.create(**_chat()).choices[0].message.content  # serving on


def test_a_full_queue_answers_429_with_retry_after(smol_path: Path) -> None:
    running = start(smol_path, max_queue=2, n_ctx=512)
    try:
        client = running.client()
        long = {"model": MODEL, "max_tokens": 200, "temperature": 0,
                "messages": [{"role": "user", "content": "Write a long story about a dragon."}]}
        results: list[Any] = []
        threads = [threading.Thread(target=lambda: results.append(client.chat.completions.create(**long)))
                   for _ in range(2)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while running.engine.pending < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        got, headers, payload = _raw(running.url + "/chat/completions", json.dumps(_chat()))
        assert got == 429 and payload["error"]["code"] == "rate_limit_exceeded", payload
        assert int(headers.get("retry-after") or headers.get("Retry-After")) >= 1
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(**_chat())
        for t in threads:
            t.join(300)
        assert len(results) == 2 and all(r.choices[0].message.content for r in results)
    finally:
        running.server.stop()
        running.engine.close()


def test_eight_concurrent_clients_each_get_their_own_reply(served: Running) -> None:
    """Every request is answered, with its own prompt's continuation: each counts on from its own number (111, ...,
    116 goes on with 117), so a reply mixed up with another request's would carry the other's number."""
    starts = [100 * i + 11 for i in range(1, 9)]
    answers: dict[int, Any] = {}
    errors: list[BaseException] = []

    def ask(start: int) -> None:
        try:
            answers[start] = served.client().completions.create(
                model=MODEL, prompt=", ".join(str(start + j) for j in range(6)) + ",", max_tokens=4, temperature=0)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=ask, args=(n,)) for n in starts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors and sorted(answers) == starts
    for start, answer in answers.items():
        assert answer.choices[0].text.startswith(f" {start + 6}"), (start, answer.choices[0].text)
        assert answer.usage.completion_tokens <= 4


# --- the command --------------------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_specchat_serve_runs_until_interrupted(smol_path: Path, tmp_path: Path) -> None:
    port = _free_port()
    env = {**os.environ, "SPECCHAT_HOME": str(tmp_path), "SPECCHAT_API_KEY": ""}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "-m", str(smol_path), "--port", str(port),
                             "-c", "512", "-t", "2"], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        lines = []
        while not any("serving" in line for line in lines):
            line = proc.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
        assert f"http://127.0.0.1:{port}/v1" in lines[-1]
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        reply = client.chat.completions.create(**_chat())
        assert reply.choices[0].message.content and reply.model == smol_path.stem
        taken = subprocess.run([sys.executable, "-m", "app.cli", "serve", "-m", str(smol_path), "--port", str(port)],
                               cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert taken.returncode == 2 and "Cannot listen" in taken.stderr and "--port" in taken.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 130  # Ctrl+C: the shell's status for an interrupted command, after a clean shutdown
        assert proc.stderr is not None and "Traceback" not in proc.stderr.read()
