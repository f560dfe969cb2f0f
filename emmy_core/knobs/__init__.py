"""Knobs: the two vocabularies, candidate enumeration per kernel and card, static validity on a card."""

from emmy_core.knobs.instructions import INSTRUCTIONS, Instruction, instruction_features, tile_instruction
from emmy_core.knobs.space import Candidate, candidate_options, candidates, first_option, sample_candidates
from emmy_core.knobs.validity import option_problem, view_problem
from emmy_core.knobs.view import FAMILY_KNOBS, KernelView, view

__all__ = [
    "FAMILY_KNOBS",
    "INSTRUCTIONS",
    "Candidate",
    "Instruction",
    "KernelView",
    "candidate_options",
    "candidates",
    "first_option",
    "instruction_features",
    "option_problem",
    "sample_candidates",
    "tile_instruction",
    "view",
    "view_problem",
]
