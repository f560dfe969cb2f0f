"""Optimizer steps counted in this process, for the weights a compiled model packed.

A compiled model follows its weights by torch's version counter, which every in-place edit bumps, and by
where their data lives (`emmy_core.compiler.weights`). torch's fused optimizers (`Adam(fused=True)`,
`AdamW(fused=True)`, `SGD(fused=True)`: the default of some trainers) write the parameters in one kernel that
bumps no version counter, so an evaluation between training steps kept running on the weights it packed
first. torch calls every global optimizer step hook after any optimizer's step, fused or not: `steps_taken`
registers one on first use (never at import) and counts, and a compiled model reads its weights anew when the
count moved since it packed them.
"""

from __future__ import annotations

import threading
from typing import Any

from torch.optim.optimizer import register_optimizer_step_post_hook

_lock = threading.Lock()
_registered = False
_count = 0


def _counted(optimizer: Any, args: Any, kwargs: Any) -> None:
    global _count
    _count += 1


def steps_taken() -> int:
    """Optimizer steps taken since Emmy first asked (the hook is registered on the first call)."""
    global _registered
    if not _registered:
        with _lock:
            if not _registered:
                register_optimizer_step_post_hook(_counted)
                _registered = True
    return _count
