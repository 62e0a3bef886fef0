"""Draft vocabularies (d2t/t2d): count tokens, measure coverage, compare, build and remap.

Library entry points (each returns a dataclass; :mod:`draftlab.report.vocab` renders it):
:func:`count_tokens` / :func:`count_to_file`, :func:`coverage`, :func:`compare_mappings`,
:func:`build_mapping` / :func:`build_mapping_file`, :func:`remap_drafter`; the mapping type is
:class:`VocabMapping` (:func:`load_mapping` reads a drafter or a mapping file).
"""

from draftlab.vocab.build import BuildResult, build_mapping, build_mapping_file, select_draft_tokens
from draftlab.vocab.compare import CompareResult, compare_mappings
from draftlab.vocab.count import CountResult, count_to_file, count_tokens
from draftlab.vocab.counts import TokenCounts, read_counts
from draftlab.vocab.coverage import CoverageResult, MissingToken, coverage
from draftlab.vocab.mapping import VocabMapping, load_mapping
from draftlab.vocab.remap import INIT_METHODS, RemapResult, remap_drafter

__all__ = [
    "INIT_METHODS", "BuildResult", "CompareResult", "CountResult", "CoverageResult", "MissingToken",
    "RemapResult", "TokenCounts", "VocabMapping", "build_mapping", "build_mapping_file", "compare_mappings",
    "count_to_file", "count_tokens", "coverage", "load_mapping", "read_counts", "remap_drafter",
    "select_draft_tokens",
]
