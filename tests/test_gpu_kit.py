"""The GPU kit (packaging/gpu_kit, docs/GPU.md): synthetic GGUFs from the demo pair's headers, the
trace replay, and the whole dry run of `packaging/gpu_check.sh` on this build, as CI runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader
from gguf.quants import dequantize

from app.models.gguf_meta import read_gguf

ROOT = Path(__file__).resolve().parents[1]
KIT = ROOT / "packaging" / "gpu_kit"
sys.path.insert(0, str(KIT))

import check  # noqa: E402
import gguf_headers  # noqa: E402
import replay  # noqa: E402
import serve_prediction  # noqa: E402
import synth_gguf  # noqa: E402

REPORT_FIELDS = check.REPORT_FIELDS


@pytest.fixture(scope="module")
def headers(target_path: Path, draft_path: Path) -> dict:
    folder = KIT / "carry" / "headers"  # the dry run's and prepare.sh's folder: extracted once (~20 s)
    for name in gguf_headers.SOURCES:  # stale headers (another demo pair) would pass for the real ones
        path = folder / f"{name}.gguf.gz"
        if path.is_file() and path.stat().st_mtime < max(target_path.stat().st_mtime, draft_path.stat().st_mtime):
            path.unlink()
    gguf_headers.extract_demo(target_path.parent, folder)
    return {name: gguf_headers.load(folder / f"{name}.gguf.gz") for name in gguf_headers.SOURCES}


def test_headers_are_small_and_rebuild_the_real_tensor_tables(headers: dict, target_path: Path,
                                                              draft_path: Path) -> None:
    for name, real in (("demo-target", target_path), ("demo-draft", draft_path)):
        table = [(t.name, list(t.shape), t.type) for t in read_gguf(real).tensors]  # the app's own parser
        spec = synth_gguf.spec_from(headers[name], name)
        assert spec.tensors == table  # names, ggml dims and quantisation types, in file order
        assert len(headers[name].value("tokenizer.ggml.tokens")) == 151936
    # the whole kit travels to the GPU machine: each header must stay a small fraction of 64 MiB
    assert all(len(h.value("tokenizer.ggml.merges")) > 100000 for h in headers.values())


def test_synthetic_blocks_are_valid_and_finite(headers: dict, tmp_path: Path) -> None:
    spec = synth_gguf.spec_from(headers["demo-draft"], "draft", layers=1)
    path = synth_gguf.write(spec, tmp_path / "draft.gguf")
    reader = GGUFReader(path)
    assert [(t.name, [int(d) for d in t.shape], t.tensor_type.name) for t in reader.tensors] == spec.tensors
    types_seen = set()
    for t in reader.tensors:
        if t.name.startswith("blk.0.") or t.name == "output_norm.weight":
            values = dequantize(t.data, t.tensor_type)
            assert np.isfinite(values).all(), t.name
            assert 0 < np.abs(values).mean() < 2.0, t.name  # norms ~1, weights ~1/sqrt(n_in)
            types_seen.add(t.tensor_type.name)
    assert {"Q5_0", "Q8_0", "F32"} <= types_seen  # the draft's mix (and Q6_K/Q4_K in ffn_down)


def test_synthetic_weights_are_zero_mean_for_every_block_type(tmp_path: Path) -> None:
    """A weight mean as large as its spread made activations grow with n_in at every layer (past fp16's range:
    the 7B's NaN logits on CUDA in run 26); the types with a block minimum get it set against the scale."""
    import io

    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    pool = np.random.default_rng(0).integers(0, 256, 1 << 22, dtype=np.uint8)
    n_in = 1024
    for ttype in synth_gguf._SCALES:
        buf = io.BytesIO()
        synth_gguf._write_tensor(buf, "blk.0.ffn_up.weight", [n_in, 64], ttype, np.random.default_rng(1), pool)
        qtype = GGMLQuantizationType[ttype]
        size = GGML_QUANT_SIZES[qtype][1]
        w = dequantize(np.frombuffer(buf.getvalue(), dtype=np.uint8).reshape(-1, size), qtype).reshape(-1)
        assert abs(w.mean()) * np.sqrt(n_in) < 0.2, ttype  # the spread is ~1 / sqrt(n_in)
        assert 0.4 < w.std() * np.sqrt(n_in) < 2.0, ttype


def test_7b_shape_follows_the_published_config_and_pairs_with_the_draft(headers: dict, tmp_path: Path) -> None:
    from app.models.pair_doctor import check_pair

    specs = synth_gguf.demo_specs(headers["demo-target"], headers["demo-draft"],
                                  {"target-7b": 1, "draft-0.5b": 1, "target-1.5b": 1})
    seven = dict((n, (d, t)) for n, d, t in specs["target-7b"].tensors)
    assert seven["output.weight"] == ([3584, 152064], "Q6_K")
    assert seven["token_embd.weight"] == ([3584, 152064], "Q4_K")
    assert seven["blk.0.attn_k.weight"][0] == [3584, 512]  # 4 KV heads of 128
    assert seven["blk.0.ffn_down.weight"][0] == [18944, 3584]
    target = synth_gguf.write(specs["target-7b"], tmp_path / "t.gguf")
    draft = synth_gguf.write(specs["draft-0.5b"], tmp_path / "d.gguf")
    report = check_pair(target, draft)
    assert report.compatible, report.reason


def _trace(bits: str) -> dict:
    return {"id": "t", "n_reply": len(bits), "draft_agree": bits, "lookup": [[0, 0, 0]] * len(bits)}


def test_replay_keeps_drafting_where_the_costs_say_it_pays() -> None:
    gpu = replay.Costs({r: 5.0 + 0.1 * r for r in range(1, 18)}, draft_ms=1.0, step_ms={})
    good = replay.predict([_trace(("1" * 9 + "0") * 30)], gpu, k_max=6)["draft"]
    assert good["drafting_pays"] and good["governor_ok"] and good["governed"] > 1.8
    bad = replay.predict([_trace("0" * 300)], gpu, k_max=6)["draft"]
    assert not bad["drafting_pays"] and bad["governor_ok"] and bad["replies_drafting_at_end"] == 0
    serial = replay.Costs({r: 5.0 * r for r in range(1, 18)}, draft_ms=2.0, step_ms={})
    assert not replay.predict([_trace("1" * 300)], serial, k_max=6)["draft"]["drafting_pays"]


def test_committed_traces_come_from_the_demo_pair() -> None:
    data = json.loads((KIT / "acceptance_traces.json").read_text())
    assert data["pair"]["target"].startswith("qwen2.5-coder-1.5b") and data["pair"]["draft"].startswith("qwen2.5")
    assert len(data["traces"]) >= 5
    for t in data["traces"]:
        assert len(t["draft_agree"]) == t["n_reply"] == len(t["lookup"]) > 0


def test_committed_prediction_replies_are_bench_serves_edits_by_the_demo_target() -> None:
    from app.cli.bench_serve import load_requests

    data = json.loads(serve_prediction.REPLIES.read_text())
    assert data["model"].startswith("qwen2.5-coder-1.5b")
    edits = {r.id for r in load_requests(None) if r.prediction is not None}
    assert {r["id"] for r in data["requests"]} == edits
    for r in data["requests"]:
        assert r["reply"] and r["prediction"] and r["prompt"] and r["eog"]


def test_prediction_replay_prices_the_replies_by_the_device_costs() -> None:
    """The kit's serve phase on two made-up devices: one whose verify costs hardly grow with the rows (a GPU), where
    copying the edited file pays several times over, and one where every row costs a plain step, where nothing can
    pay and the governors must keep drafting from costing more than a few percent. The replay itself asserts that
    each mode writes the recorded reply."""
    flat = serve_prediction.predict({r: 1.0 + 0.02 * (r - 1) for r in range(1, 65)}, on_gpu=True)
    assert flat["requests"] == 8 and flat["tokens"] > 2000
    assert flat["geomean"]["lookup+prediction"] > 2.0 and flat["geomean"]["none+prediction"] > 2.0
    assert flat["prediction_over_lookup"] >= 0.98
    serial = serve_prediction.predict({r: float(r) for r in range(1, 65)}, on_gpu=False)
    for mode, ratio in serial["geomean"].items():
        assert 0.9 <= ratio <= 1.0 + 1e-9, (mode, ratio)


@pytest.mark.slow
def test_dry_run_writes_every_report_field(tmp_path: Path, target_path: Path, draft_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(["bash", "packaging/gpu_check.sh", "--dry-run", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert (out / "report.md").read_text().startswith("# SpecChat GPU check (dry run)")
    for field in REPORT_FIELDS:
        assert field in report, field
    assert not report["errors"]
    memory = report["memory"]
    assert {m["n_ctx"] for m in memory} >= {2048, 8192, 32768}
    assert {m["model"] for m in memory} == {"target-1.5b", "draft-0.5b", "target-7b"}
    assert {m["n_gpu_layers"] for m in memory} >= {0, -1} and any(m["n_gpu_layers"] > 0 for m in memory)
    for m in memory:
        assert m["reported_bytes"] > 0
        assert abs(m["predicted_bytes"] - m["reported_bytes"]) <= 0.05 * m["reported_bytes"], m
    for model in ("target-1.5b", "draft-0.5b", "target-7b"):
        assert set(range(1, 17)) <= {int(k) for k in report["verify_ms"][model]}
    assert set(report["identity"]["target-1.5b"]) == {"flash_attn_on", "flash_attn_off"}
    assert set(report["engine_overhead_pct"]["1.5b/0.5b"]) == {"none", "lookup", "draft", "hybrid", "lookup-no-copies"}
    # The app's defaults: long copies on "auto", K up to 31, as sure copies on this CPU build (the copy
    # governor's on a GPU); "lookup-no-copies" turns them off.
    runs = report["engine"]["1.5b/0.5b"]
    assert {r["copy_max"] for name, r in runs.items() if name != "lookup-no-copies"} == {31}
    assert runs["lookup-no-copies"]["copy_max"] == 0 and all(r["sure_copies"] for r in runs.values())
    assert {32, 24} <= {int(k) for k in report["verify_ms"]["target-1.5b"]}
    for pair in ("1.5b/0.5b", "7b/0.5b"):
        assert set(report["predicted_speedup"][pair]) == {"draft", "lookup", "hybrid"}
    for pair in ("1.5b/0.5b", "7b/0.5b", "agreeing-0.5b/2-layer"):
        assert set(report["governor"]["engine"][pair]) == {"lookup", "draft", "hybrid", "lookup-no-copies"}
    agreeing = report["engine"]["agreeing-0.5b/2-layer"]["draft"]
    assert agreeing["drafted"] > 0 and agreeing["accepted"] >= 0.75 * agreeing["drafted"]  # the pair agrees
    serve = report["predicted_serve"]
    assert serve["requests"] == 8 and not serve["on_gpu"]
    assert set(serve["geomean"]) == {"lookup", "lookup+prediction", "none+prediction"}
    assert "## Predicted Outputs on this device's costs" in (out / "report.md").read_text()
    assert 0 < report["carry_bytes"] < 64 << 20


@pytest.mark.slow
def test_window_dry_run_times_the_draft_passes_and_the_steps(tmp_path: Path, target_path: Path,
                                                            draft_path: Path) -> None:
    """The next GPU window's script (packaging/gpu_kit/window.sh) must work before it gets a device call:
    here its models, draft anatomy and step trace on the CPU build (llama.cpp's tools are not carried)."""
    out, work = tmp_path / "win", tmp_path / "work"
    env = {**os.environ, "GPU_KIT_NATIVE": str(tmp_path / "no-tools"), "WINDOW_WORK": str(work)}
    proc = subprocess.run(["bash", "packaging/gpu_kit/window.sh", "--dry-run", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "native-steady: skipped" in proc.stdout
    # what comes back from the device: the log and one archive of everything the steps wrote
    assert {p.name for p in out.iterdir()} == {"window.log", "window.tar.gz"}
    with tarfile.open(out / "window.tar.gz") as packed:
        assert {"./anatomy.json", "./anatomy.no-graphs.json", "./trace.json"} <= set(packed.getnames())
    anatomy = json.loads((work / "anatomy.json").read_text())
    assert anatomy["no_graphs"]["graphs_disabled"] and not anatomy["graphs_disabled"]
    for report in (anatomy, anatomy["no_graphs"]):
        for pair in ("1.5b/0.5b", "agreeing-0.5b/2-layer"):
            runs = report[pair]
            assert {"alone", "engine_pattern", "interleaved", "engine", "engine_steady",
                    "engine_steady_threads_draft_1"} <= set(runs)
            assert any(name.startswith("interleaved_threads_") for name in runs)
            assert runs["interleaved"]["draft_pass"]["n"] > 0 and runs["interleaved"]["target_verify_4"]["n"] > 0
            for name in ("engine", "engine_steady", "engine_steady_threads_draft_1"):
                engine = runs[name]
                # every drafting step decodes in the draft context, and the prompt's catch-up is left out
                assert engine["draft_decode_calls"] >= engine["steps"] > 0
                assert max(int(r) for r in engine["decode_by_rows"]) <= 8
                assert 0 < engine["draft_decode_ms"] <= engine["draft_ms"] * 1.05
    for model in json.loads((work / "nan.json").read_text()):  # the dry 1.5B reached 89,768 before format 4
        for name in ("prompt", "one_token"):
            assert model[name]["first_non_finite"] is None and model[name]["max_abs"] < 1000, model["model"]
    trace = json.loads((work / "trace.json").read_text())
    assert {"draft-fixed-k3", "draft-fixed-k3-steady"} <= set(trace["1.5b/0.5b"])
