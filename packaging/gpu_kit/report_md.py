"""report.md: the report's tables, in the form docs/GPU.md quotes them."""

from __future__ import annotations

MiB = 1 << 20


def _mib(n: int | None) -> str:
    return "–" if not n else f"{n / MiB:.2f}"


def render(r: dict) -> str:
    out = [f"# SpecChat GPU check{' (dry run)' if r.get('dry_run') else ''}", ""]
    out.append(f"backend **{r.get('backend', '?')}**, devices: "
               + ", ".join(f"{d['name']} ({d['description']})" for d in r.get("devices", [])))
    out.append(f"started {r.get('started')}, finished {r.get('finished', '(not finished)')}; "
               f"carried {r.get('carry_bytes', 0) / MiB:.2f} MiB")
    out.append("")
    out.append("| phase | result |")
    out.append("|---|---|")
    for name, p in r.get("phases", {}).items():
        out.append(f"| {name} | " + (f"{p['seconds']} s" if "seconds" in p and "failed" not in p else
                                     p.get("failed") or p.get("skipped", "")) + " |")
    out += _memory(r) + _verify(r) + _identity(r) + _engine(r) + _speedup(r) + _serve(r) + _native(r)
    return "\n".join(out) + "\n"


def _memory(r: dict) -> list[str]:
    rows = r.get("memory") or []
    if not rows:
        return []
    out = ["", "## Memory: predicted / reported by llama.cpp (MiB)", "",
           f"all within 5%: **{r.get('memory_within_5pct')}**", "",
           "| model | ctx | -ngl | FA | predicted | reported | error | worst buffer | buffers (kind@device pred/rep) "
           "| NVML process |", "|---|---|---|---|---|---|---|---|---|---|"]
    for m in rows:
        bufs = "; ".join(f"{b['kind']}@{b['device']} {_mib(b['predicted_bytes'])}/{_mib(b['reported_bytes'])}"
                         for b in m["buffers"])
        nvml = ", ".join(f"{d} {_mib(v)}" for d, v in (m.get("nvml_process_bytes") or {}).items()) or "–"
        out.append(f"| {m['model']} | {m['n_ctx']} | {m['n_gpu_layers']} | {'on' if m['flash_attn'] else 'off'} | "
                   f"{_mib(m['predicted_bytes'])} | {_mib(m['reported_bytes'])} | {m['error_pct']}% | "
                   f"{m['worst_buffer_error_pct']}% | {bufs} | {nvml} |")
    return out


def _verify(r: dict) -> list[str]:
    v = r.get("verify_ms") or {}
    if not v:
        return []
    names = list(v)
    rows = sorted({int(k) for m in v.values() for k in m})
    out = ["", "## Verify batch cost (ms, least of the repetitions; x = times one row)", "",
           "| rows | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for n in rows:
        cells = []
        for m in names:
            ms, one = v[m].get(str(n)), v[m].get("1")
            cells.append(f"{ms:.2f} ({ms / one:.2f}x)" if ms and one else "–")
        out.append(f"| {n} | " + " | ".join(cells) + " |")
    return out


def _identity(r: dict) -> list[str]:
    ident = r.get("identity") or {}
    if not ident:
        return []
    out = ["", "## K-row verify logits vs one-token logits", "",
           "| model | flash attention | rows bit-identical | rows differing (max abs diff) | argmax always same |",
           "|---|---|---|---|---|"]
    for model, by_fa in ident.items():
        for fa, rows in by_fa.items():
            same = [k for k, v in rows.items() if v["identical"]]
            diff = [f"{k} ({v['max_abs_diff']:.2g})" for k, v in rows.items() if not v["identical"]]
            argmax = all(v["same_argmax"] for v in rows.values())
            out.append(f"| {model} | {fa.removeprefix('flash_attn_')} | {', '.join(same) or '–'} | "
                       f"{', '.join(diff) or '–'} | {argmax} |")
    return out


def _engine(r: dict) -> list[str]:
    eng = r.get("engine") or {}
    if not eng:
        return []
    out = ["", "## The engine on the synthetic pairs (greedy)", "",
           "| pair | mode | tok/s | vs none | outside llama.cpp | accepted/drafted | drafting at end | "
           "expected best-K speedup | governor ok | decisions |", "|---|---|---|---|---|---|---|---|---|---|"]
    for pair, modes in eng.items():
        for mode, e in modes.items():
            decisions = "; ".join(f"{g['step']}:{g['action']} {g['k'][0]}->{g['k'][1]}" for g in e["governor"][:4])
            out.append(f"| {pair} | {mode} | {e['tokens_per_second']} | {e.get('speedup_vs_none')} | "
                       f"{e['engine_overhead_pct']}% ({e['outside_llama_ms_per_token']} ms/token) | "
                       f"{e['accepted']}/{e['drafted']} | {e['drafting_at_end']} | "
                       f"{e.get('best_fixed_k_speedup_expected', '–')} | {e.get('governor_ok', '–')} | "
                       f"{decisions or '–'} |")
    return out


def _speedup(r: dict) -> list[str]:
    sp = r.get("predicted_speedup") or {}
    if not sp:
        return []
    t = r.get("traces", {})
    out = ["", f"## Predicted speedup: this device's costs x the real pair's acceptance "
               f"({t.get('replies')} replies, {t.get('tokens')} tokens recorded {t.get('recorded')})", "",
           "| pair | mode | governed | best fixed K | drafting pays | governor ok | replies drafting at end |",
           "|---|---|---|---|---|---|---|"]
    for pair, modes in sp.items():
        for mode, p in modes.items():
            out.append(f"| {pair} | {mode} | {p['governed']}x | {p['best_fixed']}x (K={p['best_fixed_k']}) | "
                       f"{p['drafting_pays']} | {p['governor_ok']} | {p['replies_drafting_at_end']}/{p['replies']} |")
    return out


def _serve(r: dict) -> list[str]:
    sp = r.get("predicted_serve") or {}
    if not sp:
        return []
    out = ["", f"## Predicted Outputs on this device's costs: bench-serve's {sp['requests']} edit requests "
               f"({sp['tokens']} reply tokens by {sp['model']}, recorded {sp['recorded']}), against plain decoding "
               "in plain steps", "",
           "| request | lookup | lookup + prediction | none + prediction | prediction over lookup |",
           "|---|---|---|---|---|"]
    rows = {**sp["per_request"], "geometric mean": sp["geomean"]}
    for rid, c in rows.items():
        out.append(f"| {rid} | {c['lookup']:.3f} | {c['lookup+prediction']:.3f} | {c['none+prediction']:.3f} | "
                   f"{c['lookup+prediction'] / c['lookup']:.3f} |")
    return out


def _native(r: dict) -> list[str]:
    nat = r.get("native") or {}
    if not nat:
        return []
    if "skipped" in nat:
        return ["", f"## llama.cpp's own tools: skipped ({nat['skipped']})"]
    out = ["", "## SpecChat against llama.cpp's own tools on the same kernels (`specchat bench --native`, greedy)", "",
           "| pair | mode | median tok/s | vs llama.cpp plain: median [min, max] | identical | accepted/drafted |",
           "|---|---|---|---|---|---|"]
    for pair, p in nat.items():
        if "modes" not in p:
            out.append(f"| {pair} | {p.get('failed') or p.get('skipped')} | | | | |")
            continue
        for mode, m in p["modes"].items():
            tps = m.get("median_tokens_per_second")
            ratio = m.get("median_speedup_vs_llama_cpp")
            span = (f"{ratio:.3f} [{m['min_speedup_vs_llama_cpp']:.3f}, {m['max_speedup_vs_llama_cpp']:.3f}]"
                    if ratio is not None else "–")
            out.append(f"| {pair} | {mode} | {tps:.1f} | {span} | {m.get('identical')}/{m.get('prompts')} | "
                       f"{m.get('accepted')}/{m.get('drafted')} |")
    return out
