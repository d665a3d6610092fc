"""Hostile and careless uses of the data-in surfaces: edge lists with headers and byte-order
marks, keyed feature and label files, labels that are names or skip a class, generator specs
that repeat or cannot be met, features that the default normalisation would spoil."""
from __future__ import annotations

from tests.helpers.hostile import Case

CASES: list[Case] = []
add = CASES.append
