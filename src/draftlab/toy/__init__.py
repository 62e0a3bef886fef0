"""A tiny target and EAGLE-3 drafter trained in seconds, with non-trivial acceptance: see :mod:`draftlab.toy.pair`."""

from draftlab.toy.pair import ToyPair, build_toy_pair, cached_toy_pair

__all__ = ["ToyPair", "build_toy_pair", "cached_toy_pair"]
