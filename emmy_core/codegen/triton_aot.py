"""Ahead-of-time compile of one generated Triton source for a CUDA architecture (run as a subprocess).

`python -m emmy_core.codegen.triton_aot '<job json>'` loads the cached source named in the
job, compiles its kernel for `sm_<arch>` with Triton's own compiler (no GPU needed) and
prints one JSON line of facts: the size of each stage's output, the count of tensor-core
instructions in the PTX (`wgmma`, `mma_sync`) and the shared memory it takes. `triton_gen.compile_for` is the caller;
it runs this in a process without TRITON_INTERPRET, since Triton defines its library
kernels for one mode per process.
"""

from __future__ import annotations

import json
import re
import sys


def main(argv: list[str]) -> int:
    from pathlib import Path

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from emmy_core.codegen.triton_gen import load_module

    job = json.loads(argv[0])
    module = load_module(Path(job["path"]))
    # pointers specialised as 16-byte aligned, as Triton's launcher does for torch's allocations
    aligned = {(i,): [["tt.divisibility", 16]] for i, t in enumerate(job["signature"].values()) if t.startswith("*")}
    src = ASTSource(fn=getattr(module, job["function"]), signature=job["signature"],
                    constexprs=dict(job.get("constants", {})), attrs=aligned)
    compiled = triton.compile(src, target=GPUTarget("cuda", int(job["arch"]), int(job["warp_size"])),
                              options={"num_warps": int(job["num_warps"]), "num_stages": int(job["num_stages"])})
    ptx = compiled.asm.get("ptx", "")
    facts = {f"bytes_{k}": len(v) for k, v in compiled.asm.items()}
    facts.update({"wgmma": ptx.count("wgmma.mma_async"), "mma_sync": ptx.count("mma.sync"),
                  "vector_loads": len(re.findall(r"ld\.global(?:\.\w+)*\.v[248]\.", ptx)),
                  "scalar_loads": len(re.findall(r"ld\.global(?:\.(?!v[248]\b)\w+)*\.[bfsu](?:8|16|32|64)\b", ptx)),
                  "shared_bytes": int(compiled.metadata.shared)})
    print(json.dumps(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
