"""Errors of the graph layer: each one says which op and which model line is at fault."""

from __future__ import annotations


class GraphError(ValueError):
    """A model the graph layer cannot capture or lower, for a reason other than an unknown op."""


class UnsupportedOp(GraphError):
    """An operation outside the supported set; names the op and the model's source line."""

    def __init__(self, op: str, source: str, reason: str = "") -> None:
        self.op = op
        self.source = source
        self.reason = reason
        where = source or "<unknown source line>"
        why = f" ({reason})" if reason else ""
        super().__init__(f"unsupported op {op}{why} at {where}")
