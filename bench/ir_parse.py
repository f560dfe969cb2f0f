"""Does a 1 MB loop program parse in under 2 seconds (linear, no backtracking)?

Builds a valid program of about 1 MB (many stores, deep-ish expressions), then times
`parse` against two baselines measured in the same run: `json.loads` of a JSON
document of the same size, and the tokenizer alone. Prints seconds, the ratios and
peak memory. Run: .venv/bin/python bench/ir_parse.py
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emmy_core.ir import parse, render
from emmy_core.ir.text import tokenize


def program_text(target_bytes: int) -> str:
    head = "kernel big {\n  axis B = dyn(8)\n  axis H = 4096\n  in x: f32[B, H]\n  in w: f32[H]\n"
    outs, stmts = [], []
    i = 0
    size = len(head)
    while size < target_bytes:
        outs.append(f"  out y{i}: f32[B, H]\n")
        stmts.append(
            f"      y{i}[b, h] = add(mul(x[b, h], w[h]), exp(neg(mul(x[b, h], const(f32, {i}.5)))))\n"
        )
        size += len(outs[-1]) + len(stmts[-1])
        i += 1
    return head + "".join(outs) + "  for b in B {\n    for h in H {\n" + "".join(stmts) + "    }\n  }\n}\n"


def best_of(fn, repeats: int = 3) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    text = program_text(1024 * 1024)
    doc = json.dumps({"stmts": [[f"y{i}", ["b", "h"], ["add", ["mul", "x", "w"], i]] for i in range(12000)]})
    doc = doc[: len(text)] if len(doc) > len(text) else doc
    t_parse = best_of(lambda: parse(text))
    t_tok = best_of(lambda: tokenize(text))
    t_json = best_of(lambda: json.loads(json.dumps({"s": doc})))
    program = parse(text)
    assert render(program) == text
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"program: {len(text) / 1e6:.2f} MB, {len(program.buffers)} buffers")
    print(f"parse: {t_parse:.3f} s   (target < 2 s: {'ok' if t_parse < 2 else 'MISSED'})")
    print(f"tokenize alone: {t_tok:.3f} s   parse / tokenize = {t_parse / t_tok:.2f}x")
    print(f"json.loads of a same-size document: {t_json:.4f} s   parse / json = {t_parse / t_json:.1f}x")
    half = program_text(512 * 1024)
    t_half = best_of(lambda: parse(half))
    print(f"0.5 MB parse: {t_half:.3f} s   1 MB / 0.5 MB = {t_parse / t_half:.2f}x (2.0 = linear)")
    print(f"peak RSS: {rss_mb:.0f} MB")


if __name__ == "__main__":
    main()
