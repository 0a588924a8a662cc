"""llama.cpp's RPC backend through SpecChat: `specchat rpc-server` on loopback ports, `--rpc` on the client.

Everything that connects to a server runs in a child process: once a process has added an RPC
server, llama.cpp asks it for its memory whenever devices are listed, and ggml aborts that process
when the server is gone, which would take the whole test session with it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.llama_backend import rpc

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}


def _require_rpc() -> None:
    if not rpc.supported():
        message = "this llama-cpp-python has no RPC backend: run `python3 bootstrap.py test` (it builds with it)"
        if os.environ.get("SPECCHAT_REQUIRE_MODELS"):
            pytest.fail(message)
        pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _specchat(*args: str, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "app.cli.main", *args], cwd=ROOT, env=env or ENV, capture_output=True, text=True,
                          timeout=timeout)


class Server:
    def __init__(self, port: int, *extra: str) -> None:
        self.port = port
        self.endpoint = f"127.0.0.1:{port}"
        self.proc = subprocess.Popen([PY, "-m", "app.cli.main", "rpc-server", "--port", str(port), "-t", "2", *extra],
                                     cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        while rpc.reachable(self.endpoint, timeout=0.5) is not None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                out = self.proc.stdout.read() if self.proc.stdout else ""
                raise RuntimeError(f"rpc-server did not start: {out}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    _require_rpc()
    s = Server(_free_port())
    yield s
    s.stop()


# --- no server needed -----------------------------------------------------------------------------

def test_endpoints_are_checked_for_form():
    assert rpc.parse_endpoints("127.0.0.1:50052, 10.0.0.2:1234,127.0.0.1:50052") == ("127.0.0.1:50052",
                                                                                     "10.0.0.2:1234")
    for bad in ("localhost", "host:", "host:99999", ":50052", "host:port"):
        with pytest.raises(rpc.RpcError, match="HOST:PORT"):
            rpc.parse_endpoints(bad)


def test_bad_rpc_flag_is_one_clear_line(target_path):
    done = _specchat("generate", "-p", "hi", "-m", str(target_path), "--rpc", "nohost", "-n", "4")
    assert done.returncode == 2
    assert "'nohost' is not HOST:PORT" in done.stderr and "Traceback" not in done.stderr


def test_unreachable_server_names_the_endpoint(target_path):
    _require_rpc()
    port = _free_port()  # nothing listens there
    done = _specchat("generate", "-p", "hi", "-m", str(target_path), "--rpc", f"127.0.0.1:{port}", "-n", "4")
    assert done.returncode == 2, done.stderr
    assert f"RPC server 127.0.0.1:{port}: cannot connect" in done.stderr
    assert "specchat rpc-server" in done.stderr  # what to do
    assert "Traceback" not in done.stderr and "GGML_ASSERT" not in done.stderr


def _old_server(port: int, stop: threading.Event) -> None:
    """Answers the HELLO handshake as a server of RPC protocol 3.0.0 would."""
    with socket.create_server(("127.0.0.1", port)) as srv:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            with conn:
                header = conn.recv(9, socket.MSG_WAITALL)
                if len(header) < 9:
                    continue
                size = int.from_bytes(header[1:9], "little")
                conn.recv(size, socket.MSG_WAITALL)  # the client's capabilities
                reply = bytes([3, 0, 0, 0]) + bytes(size)
                conn.sendall(len(reply).to_bytes(8, "little") + reply)


def test_protocol_mismatch_is_named(target_path):
    _require_rpc()
    port, stop = _free_port(), threading.Event()
    thread = threading.Thread(target=_old_server, args=(port, stop), daemon=True)
    thread.start()
    try:
        time.sleep(0.3)
        done = _specchat("generate", "-p", "hi", "-m", str(target_path), "--rpc", f"127.0.0.1:{port}", "-n", "4")
    finally:
        stop.set()
    assert done.returncode == 2, done.stderr
    assert f"RPC server 127.0.0.1:{port} speaks RPC protocol 3.0.0" in done.stderr
    assert f"this SpecChat speaks {rpc.PROTOCOL}" in done.stderr


def test_rpc_server_refuses_an_unknown_device():
    _require_rpc()
    done = _specchat("rpc-server", "--port", str(_free_port()), "--device", "CUDA7", timeout=60)
    assert done.returncode == 2
    assert "no device 'CUDA7' here; devices: CPU" in done.stderr


def test_rpc_server_warns_before_listening_beyond_loopback():
    _require_rpc()
    port = _free_port()
    proc = subprocess.Popen([PY, "-m", "app.cli.main", "rpc-server", "--host", "0.0.0.0", "--port", str(port)],
                            cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while rpc.reachable(f"127.0.0.1:{port}", timeout=0.5) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=10)
    assert "NO" in err and "authentication" in err and f"ssh -N -L {port}:127.0.0.1:{port}" in err


# --- against a real server ------------------------------------------------------------------------

CHILD = """
import json, sys
from pathlib import Path
from app.cli.bench import run_once
from app.engine.parting import first_divergence
from app.engine.pair_config import PairConfig
from app.engine.session import GenParams, SpecSession
from app.engine.memory_plan import predict_for_config
from app.llama_backend.devices import capture_llama_logs, parse_buffer_report

target, endpoints, n = Path(sys.argv[1]), tuple(sys.argv[2].split(",")), int(sys.argv[3])
params = GenParams("none", n, track_margins=True)
messages = [{"role": "user", "content": "Write a Python function that returns the n-th Fibonacci number."}]
# Local reference first, without repacking: the RPC server's CPU backend computes with the plain
# CPU kernels (no repacked weights there), so strict is the like-for-like local run.
with SpecSession(PairConfig(target, n_ctx=1024, n_threads=2, repack=False)) as local:
    prompt = local.chat_prompt(messages)
    plain = run_once(local, prompt, params)
cfg = PairConfig(target, n_ctx=1024, n_threads=2, repack=False, rpc=endpoints)
prediction = predict_for_config(cfg)
with capture_llama_logs() as lines:
    session = SpecSession(cfg)
remote = run_once(session, prompt, params)
layers = session.device_layers()
session.close()
div = first_divergence(plain, remote)
measured = {}
for b in parse_buffer_report(lines):
    if b.kind in ("model", "kv", "compute"):
        measured[b.device] = measured.get(b.device, 0) + b.bytes
predicted = {u.device: u.predicted_bytes for u in prediction.uses}
print(json.dumps({"plain": list(plain.tokens), "remote": list(remote.tokens), "layers": layers,
                  "divergence": None if div is None else [div.position, div.margin],
                  "measured": measured, "predicted": predicted,
                  "prediction_devices": [u.device for u in prediction.uses]}))
"""


def _child(target_path: Path, endpoints: str, n: int = 24) -> dict:
    done = subprocess.run([PY, "-c", CHILD, str(target_path), endpoints, str(n)], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_target_on_an_rpc_server_decodes_as_locally(server, target_path):
    from app.engine.parting import NEAR_TIE_MARGIN

    out = _child(target_path, server.endpoint)
    target_layers = {d["name"]: d for d in out["layers"] if d["model"] == "target"}
    assert target_layers["RPC0"]["kind"] == "rpc" and target_layers["RPC0"]["endpoint"] == server.endpoint
    assert sum(d["layers"] for d in target_layers.values()) == 29  # 28 layers + the output layer
    if out["divergence"] is None:
        assert out["remote"] == out["plain"]
    else:
        position, margin = out["divergence"]
        assert margin < NEAR_TIE_MARGIN, f"parted at token {position} where the margin was {margin:.4f}"
    # The memory plan names the RPC device, and predicts what llama.cpp allocated there within 5%.
    assert "RPC0" in out["prediction_devices"]
    measured, predicted = out["measured"]["RPC0"], out["predicted"]["RPC0"]
    assert abs(predicted - measured) <= 0.05 * measured, (predicted, measured)


def test_two_servers_share_the_target(server, target_path):
    second = Server(_free_port())
    try:
        out = _child(target_path, f"{server.endpoint},{second.endpoint}", n=8)
    finally:
        second.stop()
    on = {d["name"]: d["layers"] for d in out["layers"] if d["model"] == "target" and d["kind"] == "rpc"}
    assert len(on) == 2 and all(n > 0 for n in on.values()), out["layers"]
    assert out["remote"][:4] == out["plain"][:4] or out["divergence"][1] < 0.1


def test_memory_json_lists_rpc_devices(server, target_path):
    done = _specchat("memory", "-m", str(target_path), "-c", "1024", "--rpc", server.endpoint, "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    rpc_devices = [d for d in data["devices"] if d["rpc_endpoint"]]
    assert [d["rpc_endpoint"] for d in rpc_devices] == [server.endpoint]
    assert rpc_devices[0]["predicted_bytes"] > 800 * 2**20  # the target's weights went there
    assert rpc_devices[0]["total_bytes"] > 0  # the server's own figure


def test_server_killed_mid_reply_keeps_the_reply_and_names_the_server(target_path):
    _require_rpc()
    victim = Server(_free_port())
    proc = subprocess.Popen(
        [PY, "-m", "app.cli.main", "generate", "-m", str(target_path), "--rpc", victim.endpoint, "-c", "1024",
         "--mode", "none", "--sampling", "greedy", "-n", "400", "--no-color",
         "-p", "Write a long story about a lighthouse keeper."],
        cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    shown = ""
    deadline = time.monotonic() + 600
    while len(shown) < 40 and time.monotonic() < deadline:  # some of the reply is on screen
        char = proc.stdout.read(1)
        if not char:
            break
        shown += char
    victim.stop()
    rest, err = proc.communicate(timeout=120)
    assert len(shown) >= 40, err[-2000:]
    assert proc.returncode == 3, err[-2000:]
    assert f"RPC server {victim.endpoint} stopped answering mid-reply" in err
    assert "the reply so far is kept" in err
    assert (shown + rest).startswith(shown)  # what was printed stays printed


def test_window_keeps_the_reply_when_the_server_is_lost(target_path, tmp_path):
    """The desktop app on a server that dies mid-reply: no abort, the reply so far saved with the error."""
    _require_rpc()
    victim = Server(_free_port())
    home = tmp_path / "home"
    shot = tmp_path / "lost.png"
    env = {**ENV, "SPECCHAT_HOME": str(home), "QT_QPA_PLATFORM": "offscreen"}
    proc = subprocess.Popen(
        [PY, "-m", "ui.shell.entry", "gui", "-m", str(target_path), "--rpc", victim.endpoint, "-c", "1024",
         "--mode", "none", "--temp", "0", "-n", "400", "--prompt", "Write a Python class for a bank account with "
         "ten methods and docstrings.", "--screenshot", str(shot), "--quit-when-done"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        journals = list((home).rglob("*.journal"))
        if journals and journals[0].stat().st_size > 2000:  # a good part of the reply is on screen
            break
        time.sleep(0.2)
    victim.stop()
    _out, err = proc.communicate(timeout=180)
    # Quit after the reply ended, never aborted (SIGABRT would be -6): status 1 says the scripted reply failed.
    assert proc.returncode == 1, err[-3000:]
    done = _specchat("chats", "list", "--json", env={**ENV, "SPECCHAT_HOME": str(home)})
    chats = json.loads(done.stdout)
    assert len(chats) == 1
    exported = _specchat("chats", "export", chats[0]["id"], "--format", "json",
                         env={**ENV, "SPECCHAT_HOME": str(home)})
    reply = json.loads(exported.stdout)["messages"][-1]
    assert reply["role"] == "assistant" and len(reply["content"]) > 100  # the part that was shown
    assert f"RPC server {victim.endpoint} stopped answering mid-reply" in reply["error"]
    assert shot.exists()
