"""Exact kernel identity: a sha256 of the canonical text, dynamic axes by name only.

`kernel_id` hashes `IDENTITY_VERSION` together with the text, so raising the version
re-keys every kernel (and a store written under another version is refused).
Two kernels that differ only in a dynamic axis's expected size share an identity.
"""

from __future__ import annotations

import hashlib

from emmy_core.ir.nodes import Kernel
from emmy_core.ir.printer import render

IDENTITY_VERSION = 1


def identity_text(kernel: Kernel) -> str:
    """The text the identity is computed from: canonical, with expected sizes left out. Kept on the (immutable)
    kernel once rendered: a compile asks for the identities of the same kernels at every size it settles."""
    text = kernel.__dict__.get("_identity_text")
    if text is None:
        text = render(kernel, hints=False)
        object.__setattr__(kernel, "_identity_text", text)
    return text


def kernel_id(kernel: Kernel) -> str:
    """sha256 hex digest naming a kernel exactly (read `IDENTITY_VERSION` at call time). Kept on the kernel beside
    the version it was hashed under: a new prompt length settles the same kernels again, and hashing their text at
    every size was a share of what a new length costs."""
    version = IDENTITY_VERSION  # the module's value at call time: a patched version re-keys
    kept = kernel.__dict__.get("_identity")
    if kept is not None and kept[0] == version:
        return kept[1]
    payload = f"emmy-kernel-identity/{version}\n{identity_text(kernel)}"
    digest = hashlib.sha256(payload.encode("utf-8")).hexdigest()
    object.__setattr__(kernel, "_identity", (version, digest))
    return digest
