"""What does a fork's resolution cost, and how fast is a compiled model against torch on this CPU?

1. Resolution cost per fork for the Llama block (f16, B=8,S=128), target under 1 ms on average:
   with evidence (the repository freeze's goldens answer; its card name is borrowed for this
   machine's card, as only the name takes part in the match), and with the prior (no
   measurement; the installed prior ranks every candidate). Cold: a fresh resolver (forks
   enumerated as needed); warm: the forks of each kernel already known, sources loaded.
2. The compiled Llama block and MLP against torch eager and torch.compile (Inductor), f32 and
   f16, B=1 and B=8 at S=128: the same inputs, the contenders interleaved, medians of
   `--repeats`. Then where the time goes (kernels, layout copies, the call's own setup and the
   Python between ops) and each kernel against torch's own op for the same product or norm at
   the same shapes (the kernels that lose are the next work). Tune first (`--tune N`: `emmy
   tune` with a budget of N candidates per kernel into `--db`) so the measured tier answers;
   without rows every fork takes the rule's first option, and the table says which tier answered.

3. `torch.compile(model, backend="emmy")` (the Dynamo backend): coverage (the share of matrix-product
   FLOPs on Emmy kernels) on tiny transformer layers of `transformers` and torch (random weights, no
   downloads) and on a Llama decoder layer at a real size; then speed against eager and Inductor,
   interleaved in one run: the Llama decoder layer (hidden 2048, 32 heads, 4 key-value heads,
   intermediate 5632: TinyLlama's) f32 and f16 at B=1 and B=8, S=128, and a whole tiny LlamaModel from
   token ids; the compile time (Dynamo + partition + builds + the check against torch, first call)
   against Inductor's; and each Emmy group against the torch ops it replaced, at the same inputs
   (the groups that lose are named). The `emmy` contender is the backend's default (`attention="auto"`:
   attention where Emmy's is measured to win). `--backend-only` runs just this part; `--attention-both`
   adds the backend with attention always on Emmy and always on torch's fused kernel (does lowering
   attention pay?); `--inductor-fallback` adds the backend with `fallback="inductor"` (the ops left to
   torch compiled by Inductor around Emmy's groups), with attention as the default places it and on Emmy;
   `--tune-backend N` adds the backend after tuning each case's own kernels (N candidates per kernel, the
   prior's strategy, `emmy_core.search.module_tune`): what a performance engineer's tune buys;
   `--cases f16,B=1` keeps the speed cases whose names contain one of the words.

Run: .venv/bin/python bench/compile.py [--db _data/bench.db] [--tune 16] [--repeats 30] [--no-inductor]
     .venv/bin/python bench/compile.py --backend-only --repeats 5 --attention-both   (the backend's figures)
Prints the load average beside the figures: timings on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.nn.functional as F

import emmy_core
from emmy_core.compiler.compare import compare
from emmy_core.dtypes import torch_dtype
from emmy_core.evidence.context import load_prior_best_effort
from emmy_core.evidence.freeze import card_files, shipped_freeze_dir
from emmy_core.evidence.measured import LocalSource
from emmy_core.evidence.model import ModelResolver, resolutions_of
from emmy_core.evidence.sources import PriorSource, RuleSource, Sources, Unavailable
from emmy_core.graph.models import build_model
from emmy_core.graph.pipeline import compile_model
from emmy_core.ir.family import MatmulShape, classify
from emmy_core.ir.sizes import extents
from emmy_core.targets import local_card

ROOT = Path(__file__).resolve().parents[1]


def _median_us(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return 1e6 * statistics.median(ts)


# ---- 1. resolution cost ----------------------------------------------------------------------


def _freeze_card_name() -> str | None:
    import json

    for p in sorted(shipped_freeze_dir().glob("*.json")):
        if ".tune-" not in p.name:
            return json.loads(p.read_text())["card"]["name"]
    return None


def resolution_cost(repeats: int) -> None:
    shape = {"B": 8, "S": 128}
    lowered = compile_model("llama_block", shape, torch.float16)
    here = local_card()
    name = _freeze_card_name()
    print(f"== 1. resolution cost per fork: llama_block f16 B=8,S=128 ({len(lowered.kernels)} kernel steps)")
    runs: list[tuple[str, Sources, bool]] = []  # (what, sources, whether each round resolves a new size)
    if name is not None:
        from emmy_core.evidence.context import open_sources

        card = dataclasses.replace(here, name=name)
        sources = open_sources(card, "deploy", tuning_db=Path(tempfile.mkdtemp()) / "none.db", prior=False)
        runs.append((f"with evidence (the freeze of {name})", sources, False))
    prior, label, why = load_prior_best_effort(None)
    if prior is not None:
        runs.append((f"with the prior ({label})", Sources(here, "deploy", (
            Unavailable("golden", "not used here"), LocalSource(Path(tempfile.mkdtemp()) / "none.db", here.name, "deploy"),
            PriorSource(prior, label), RuleSource())), True))
    else:
        print(f"  with the prior: not measured: {why}")
    for what, sources, new_sizes in runs:
        resolver = ModelResolver(sources)
        t0 = time.perf_counter()
        plans = resolver.model(lowered, shape)
        cold = time.perf_counter() - t0
        res = resolutions_of(plans)
        tiers = {r.tier for r in res}
        warm = []
        for i in range(repeats):
            resolver.plans.clear()  # the forks stay known; every fork is resolved again
            at = {"B": shape["B"] + 1 + i, "S": shape["S"]} if new_sizes else shape  # the prior scores anew
            t0 = time.perf_counter()
            resolver.model(lowered, at)
            warm.append(time.perf_counter() - t0)
        n = len(res)
        again = "a new size each round" if new_sizes else "the same size again"
        print(f"  {what}: {n} forks answered by {', '.join(sorted(tiers))}; cold {1e3 * cold / n:.3f} ms per fork "
              f"(first resolution: forks enumerated as needed, sources read); warm {1e3 * statistics.median(warm) / n:.3f} "
              f"ms per fork (median of {repeats}, {again}, forks already enumerated)")
        sources.close()


# ---- 2. models against torch -----------------------------------------------------------------


def _torch_op(step, sizes: dict[str, int], dtype: torch.dtype):  # type: ignore[no-untyped-def]
    """torch's own op for a kernel step's product or norm at its shapes (None where there is no one op)."""
    program = step.program
    ext = extents(program, step.sizes(sizes))
    gen = torch.Generator().manual_seed(0)

    def t(buf: str) -> torch.Tensor:
        return torch.randn([ext[a] for a in program.buffer(buf).shape], generator=gen).to(dtype)

    if step.family == "matmul":
        shape = classify(program)
        assert isinstance(shape, MatmulShape)
        a, b = t(shape.a), t(shape.b)
        bt = program.buffer(shape.b).shape[-1] == shape.k
        return lambda: torch.matmul(a, b.transpose(-1, -2) if bt else b)
    x = t("x")
    h = x.shape[-1]
    if step.family == "rmsnorm":
        w = t("w")
        return lambda: F.rms_norm(x, (h,), w, 1e-5)
    if step.family == "layernorm":
        w, bias = t("w"), t("bias")
        return lambda: F.layer_norm(x, (h,), w, bias)
    if step.family == "softmax":
        return lambda: torch.softmax(x, -1)
    return None


def tune(db: Path, budget: int, models: list[str], dtypes: list[str], batches: list[int], seq: int) -> None:
    for model in models:
        for dtype in dtypes:
            for b in batches:
                cmd = [sys.executable, "-m", "emmy_core.cli.main", "tune", "--model", model, "--shape",
                       f"B={b},S={seq}", "--dtype", dtype, "--budget", str(budget), "--db", str(db), "--no-progress"]
                print(f"  tuning: {' '.join(cmd[3:])}", flush=True)
                proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
                tail = (proc.stdout or proc.stderr).strip().splitlines()[-1:] or ["(no output)"]
                print(f"    exit {proc.returncode}: {tail[0][:200]}", flush=True)


def models_vs_torch(args: argparse.Namespace) -> None:
    print(f"\n== 2. compiled models against torch eager and torch.compile (Inductor), S={args.seq}; "
          f"tuning database {args.db or '(none: a fresh path)'}")
    db = args.db or Path(tempfile.mkdtemp()) / "none.db"
    losers: dict[str, list[str]] = {}
    for model in args.models.split(","):
        for dt in args.dtypes.split(","):
            dtype = torch_dtype(dt)
            for b in (int(x) for x in args.batches.split(",")):
                sizes = {"B": b, "S": args.seq}
                module, inputs = build_model(model, dtype)
                x = inputs(sizes)
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    compiled = emmy_core.compile(module, x, tuning_db=db, torch_ops="refuse").one_graph
                compile_s = time.perf_counter() - t0
                result = compare(compiled, module, x, repeats=args.repeats, inductor=not args.no_inductor)
                med = result.medians_us
                tiers = ", ".join(f"{t} {n}" for t, n in compiled.record.tiers().items() if n)
                line = f"  {model:<11} {dt} B={b:<2}: emmy {med['emmy']:9.1f} us, eager {med['eager']:9.1f} us"
                if "inductor" in med:
                    line += f", inductor {med['inductor']:9.1f} us"
                line += f"; emmy/eager speed {result.ratio('eager'):.2f}x"
                if "inductor" in med:
                    line += f", vs inductor {result.ratio('inductor'):.2f}x"
                line += f"; max error {result.max_error:.2g}; forks: {tiers}; compile {compile_s:.1f} s; " \
                        f"load {result.load[0]:.2f}"
                print(line, flush=True)
                for name, why in result.failed.items():
                    print(f"    {name} failed: {why}")
                runner = compiled.runner(sizes)
                prof = runner.profile(x, repeats=max(5, args.repeats // 3))
                calls = {what: us for kind, what, us in prof if kind == "call"}
                by_kind: dict[str, float] = {}
                for kind, _, us in prof:
                    if kind != "call":
                        by_kind[kind] = by_kind.get(kind, 0.0) + us
                overhead = calls["whole"] - calls["setup"] - sum(by_kind.values())
                how = "prepared launches" if runner.prepared else "each through the checked call"
                print(f"    where the time goes (a whole call {calls['whole']:.1f} us in the same rounds): kernels "
                      f"{by_kind.get('kernel', 0):.1f} us ({sum(1 for k, *_ in prof if k == 'kernel')} launches, "
                      f"{how}), layout copies {by_kind.get('copy', 0):.1f} us, views {by_kind.get('view', 0):.1f} us, "
                      f"inputs and outputs {calls['setup']:.1f} us, the rest (Python between ops) {overhead:.1f} us")
                lowered = compiled.lowered
                emmy_us: dict[str, list[float]] = {}
                for kind, what, us in prof:
                    if kind == "kernel":
                        emmy_us.setdefault(what, []).append(us)
                seen: set[str] = set()
                for step in lowered.kernels:
                    name = step.program.name
                    if name in seen or name not in emmy_us:
                        continue
                    seen.add(name)
                    op = _torch_op(step, sizes, dtype)
                    mine = statistics.median(emmy_us[name])
                    if op is None:
                        print(f"    {name[:46]:<46} emmy {mine:8.1f} us  (no single torch op to compare)")
                        continue
                    theirs = _median_us(op, max(5, args.repeats // 3))
                    verdict = "LOSES" if mine > theirs else "wins"
                    if mine > theirs:
                        losers.setdefault(name, []).append(f"{model} {dt} B={b}: {mine / theirs:.2f}x slower")
                    print(f"    {name[:46]:<46} emmy {mine:8.1f} us  torch {theirs:8.1f} us  {verdict}")
    print("\nkernels that lose to torch's own op (the next work):")
    for name, where in sorted(losers.items()):
        print(f"  {name}: {'; '.join(where)}")
    if not losers:
        print("  none")


# ---- 3. the emmy Dynamo backend --------------------------------------------------------------


def _llama_cfg(hidden: int, heads: int, kv: int, ff: int, layers: int = 1):  # type: ignore[no-untyped-def]
    from transformers import LlamaConfig

    cfg = LlamaConfig(hidden_size=hidden, intermediate_size=ff, num_attention_heads=heads, num_key_value_heads=kv,
                      num_hidden_layers=layers, vocab_size=1000, max_position_embeddings=512)
    cfg._attn_implementation = "sdpa"
    return cfg


class LlamaLayer(torch.nn.Module):
    """A Llama decoder layer fed its rotary embeddings, as LlamaModel feeds it."""

    def __init__(self, cfg) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

        self.layer = LlamaDecoderLayer(cfg, 0)
        self.rope = LlamaRotaryEmbedding(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
        out = self.layer(x, position_embeddings=self.rope(x, pos), attention_mask=None)
        return out if isinstance(out, torch.Tensor) else out[0]


def _tiny_layers() -> dict[str, tuple[torch.nn.Module, int]]:
    """name -> (module, hidden) of the tiny layers the tests compile (random weights, eval mode)."""
    import transformers
    from transformers.models.bert.modeling_bert import BertLayer
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    gpt = transformers.GPT2Config(n_embd=64, n_head=4, n_inner=256, n_layer=1, resid_pdrop=0.0, attn_pdrop=0.0,
                                  embd_pdrop=0.0)
    gpt._attn_implementation = "eager"
    bert = transformers.BertConfig(hidden_size=64, num_attention_heads=4, intermediate_size=256,
                                   hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    bert._attn_implementation = "eager"
    return {"llama layer (sdpa)": (LlamaLayer(_llama_cfg(64, 4, 2, 176)), 64),
            "tiny LlamaModel (ids)": (transformers.LlamaModel(_llama_cfg(64, 4, 2, 176, layers=2)), 0),
            "gpt2 block": (GPT2Block(gpt, layer_idx=0), 64),
            "bert layer": (BertLayer(bert), 64),
            "torch encoder layer": (torch.nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0), 64)}


def _share(reports) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    return sum(r.matmul_flops_on_emmy for r in reports), sum(r.matmul_flops for r in reports)


def backend_vs_torch(args: argparse.Namespace) -> None:
    from emmy_core.compiler.backend import _GRAPHS, emmy_backend, run_backend
    from emmy_core.compiler.compare import interleaved_medians, max_error
    from emmy_core.compiler.coverage import render_reports
    from emmy_core.search.module_tune import tune_module

    db = args.db or Path(tempfile.mkdtemp()) / "none.db"
    opts = {"tuning_db": db}
    print(f"\n== 3. torch.compile(backend='emmy') coverage (matmul FLOPs on Emmy kernels), S={args.seq}")
    torch.manual_seed(0)
    for name, (module, hidden) in _tiny_layers().items():
        module.eval()
        x = torch.randint(0, 1000, (1, args.seq)) if not hidden else \
            torch.randn(args.seq, 1, hidden) if "encoder" in name else torch.randn(1, args.seq, hidden)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, reports = run_backend(module, (x,), build=False, **opts)
        on, total = _share(reports)
        torch_ops = sorted({f.op for r in reports for f in r.fell_back if f.node in
                            {n for g in _GRAPHS[-len(reports):] for n in g.flops}})
        print(f"  {name:<22} {100 * on / max(total, 1):5.1f}% of {total / 1e6:.1f} MFLOP; matrix products left to "
              f"torch: {', '.join(torch_ops) or 'none'}")
    print(f"\n== 3. torch.compile(backend='emmy') against eager and Inductor, interleaved, medians of {args.repeats}")
    from transformers import LlamaModel

    torch.manual_seed(0)
    tiny = LlamaModel(_llama_cfg(256, 8, 4, 688, layers=2)).eval()
    cases: list[tuple[str, torch.nn.Module, tuple]] = [
        (f"tiny LlamaModel f32 B=1,S={args.seq}", tiny, (torch.randint(0, 1000, (1, args.seq)),))]
    for b in (int(x) for x in args.batches.split(",")):  # the small batch of each type first: the cheap figures
        for dt in args.dtypes.split(","):
            torch.manual_seed(0)
            layer = LlamaLayer(_llama_cfg(2048, 32, 4, 5632)).to(torch_dtype(dt)).eval()
            cases.append((f"llama layer 2048 {dt} B={b},S={args.seq}", layer,
                          (torch.randn(b, args.seq, 2048, dtype=torch_dtype(dt)),)))
    if args.cases:
        cases = [c for c in cases if any(w in c[0] for w in args.cases.split(","))]
    losers: list[str] = []
    for what, module, x in cases:
        torch._dynamo.reset()
        before = len(_GRAPHS)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            emmy = torch.compile(module, backend=emmy_backend(**opts))
            t0 = time.perf_counter()
            got = emmy(*x)
            emmy_s = time.perf_counter() - t0
            emmy_end = len(_GRAPHS)  # the emmy contender's graphs end here (the other contenders compile their own)
            fns = {"emmy": emmy, "eager": module}
            if args.tune_backend:  # the module's own kernels tuned on this machine, then compiled reading the rows
                tuned_db = Path(tempfile.mkdtemp()) / "tuned.db"
                t0 = time.perf_counter()
                report = tune_module(module, x, budget=args.tune_backend, tuning_db=tuned_db)
                print(f"    tuned its {len(report.planned)} kernels, {args.tune_backend} candidates each "
                      f"(prior strategy): {time.perf_counter() - t0:.0f} s, {report.rows_recorded} rows", flush=True)
                fns["emmy, tuned"] = torch.compile(module, backend=emmy_backend(tuning_db=tuned_db))
                fns["emmy, tuned"](*x)
            if args.attention_both:  # the same backend with attention always on Emmy, and always torch's
                for label, attn in (("emmy, attention on emmy", True), ("emmy, attention on torch", False)):
                    fns[label] = torch.compile(module, backend=emmy_backend(attention=attn, **opts))
                    fns[label](*x)
            if args.inductor_fallback:  # the ops left to torch compiled by Inductor around Emmy's groups
                for label, attn in (("emmy+inductor", "auto"), ("emmy+inductor, attention on emmy", True)):
                    hybrid = torch.compile(module, backend=emmy_backend(fallback="inductor", attention=attn, **opts))
                    t0 = time.perf_counter()
                    hybrid(*x)
                    print(f"    {label}: first call (compile) {time.perf_counter() - t0:.1f} s", flush=True)
                    fns[label] = hybrid
            inductor_s = None
            if not args.no_inductor:
                inductor = torch.compile(module)
                t0 = time.perf_counter()
                inductor(*x)
                inductor_s = time.perf_counter() - t0
                fns["inductor"] = inductor
            want = module(*x)
            err = max_error(got if isinstance(got, torch.Tensor) else got[0],
                            want if isinstance(want, torch.Tensor) else want[0])
            last: dict[int, tuple] = {}
            for st in _GRAPHS[before:emmy_end]:
                for g in st.live_groups():
                    g.register_forward_pre_hook(lambda mod, a, last=last: last.__setitem__(id(mod), a))
            med, failed = interleaved_medians(fns, x, args.repeats, warmup=1)
        reports = [g.report() for g in _GRAPHS[before:emmy_end]]
        on, total = _share(reports)
        line = f"  {what:<30} emmy {med.get('emmy', 0) / 1e3:9.1f} ms, eager {med.get('eager', 0) / 1e3:9.1f} ms"
        if "inductor" in med:
            line += f", inductor {med['inductor'] / 1e3:9.1f} ms"
        for label in ("emmy, attention on emmy", "emmy, attention on torch"):
            if label in med:
                line += f", {label} {med[label] / 1e3:9.1f} ms"
        if "emmy, tuned" in med:
            line += f", emmy tuned {med['emmy, tuned'] / 1e3:9.1f} ms"
            if "inductor" in med:
                line += f" ({med['inductor'] / med['emmy, tuned']:.2f}x inductor)"
        for label in ("emmy+inductor", "emmy+inductor, attention on emmy"):
            if label in med:
                line += f", {label} {med[label] / 1e3:9.1f} ms"
                if "inductor" in med:
                    line += f" ({med['inductor'] / med[label]:.2f}x inductor)"
        line += f"; emmy {med['eager'] / med['emmy']:.2f}x eager"
        if "inductor" in med:
            line += f", {med['inductor'] / med['emmy']:.2f}x inductor"
        line += f"; max error {err:.2g}; matmul FLOPs on Emmy {100 * on / max(total, 1):.1f}%; first call (compile) " \
                f"emmy {emmy_s:.1f} s"
        if inductor_s is not None:
            line += f", inductor {inductor_s:.1f} s"
        print(line + f"; load {os.getloadavg()[0]:.2f}", flush=True)
        for name, why in failed.items():
            print(f"    {name} failed: {why}")
        for r in reports:
            for race in r.races:  # the per-group table: Emmy's group, Emmy's kernels only, torch's ops, the choice
                print(f"    race: {race.text()}")
            for n in r.notes:
                print(f"    note: {n}")
        with torch.no_grad():
            for st in _GRAPHS[before:emmy_end]:
                for g in st.live_groups():
                    a = last.get(id(g))
                    if a is None or g.off is not None or not g.compiled.lowered.kernels:
                        continue
                    mine = _median_us(lambda g=g, a=a: g(*a), max(3, args.repeats // 2))
                    theirs = _median_us(lambda g=g, a=a: g.torch_sub(*a), max(3, args.repeats // 2))
                    kernels = ", ".join(dict.fromkeys(k.program.name for k in g.compiled.lowered.kernels))
                    if mine > 1.05 * theirs and theirs > 50:
                        losers.append(f"{what}: {g.compiled.lowered.graph.name} {mine / 1e3:.2f} ms vs torch "
                                      f"{theirs / 1e3:.2f} ms ({kernels})")
        if args.verbose:
            print(render_reports(reports))
    print("\nEmmy groups slower than the torch ops they replace (> 5%, over 50 us):")
    for line in losers or ["  none"]:
        print(f"  {line}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path, default=None, help="tuning database the compile reads (and --tune writes)")
    ap.add_argument("--tune", type=int, default=0, help="first tune every kernel with this budget into --db")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--models", default="llama_block,mlp")
    ap.add_argument("--dtypes", default="f32,f16")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--skip-resolution", action="store_true")
    ap.add_argument("--backend-only", action="store_true", help="only part 3, the emmy Dynamo backend")
    ap.add_argument("--inductor-fallback", action="store_true",
                    help="also time the backend with fallback='inductor' (the ops left to torch compiled by Inductor "
                         "around Emmy's groups), with attention where the default places it and on Emmy")
    ap.add_argument("--attention-both", action="store_true",
                    help="also time the backend with attention always on Emmy and always torch's (does lowering "
                         "attention pay?)")
    ap.add_argument("--tune-backend", type=int, default=0, metavar="N",
                    help="part 3: also time each speed case after tuning its own kernels (emmy_core.tune_module, N "
                         "candidates per kernel, into a fresh database)")
    ap.add_argument("--cases", default="", help="only the speed cases whose name contains one of these (comma list)")
    ap.add_argument("--verbose", action="store_true", help="print the backend's coverage report of every case")
    args = ap.parse_args()
    load_before = os.getloadavg()
    card = local_card()
    print(f"card {card.name}; torch {torch.__version__}; threads {torch.get_num_threads()}; "
          f"load average {load_before[0]:.2f} on {os.cpu_count()} CPUs")
    if card_files(card.name)[0]:
        print(f"(the shipped freeze has a file for {card.name}: its goldens answer where they match)")
    if args.backend_only:
        backend_vs_torch(args)
        print(f"\nload average (1 min) before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}; peak memory "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
        return 0
    if not args.skip_resolution:
        resolution_cost(args.repeats)
    if args.tune:
        if args.db is None:
            ap.error("--tune needs --db")
        print(f"\n== tuning with a budget of {args.tune} candidates per kernel into {args.db}")
        tune(args.db, args.tune, args.models.split(","), args.dtypes.split(","),
             [int(x) for x in args.batches.split(",")], args.seq)
    models_vs_torch(args)
    backend_vs_torch(args)
    load_after = os.getloadavg()
    print(f"\nload average (1 min) before {load_before[0]:.2f}, after {load_after[0]:.2f} on {os.cpu_count()} CPUs; "
          f"peak memory {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
