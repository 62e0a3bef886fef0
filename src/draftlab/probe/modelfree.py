"""Exact model-free baselines: what vLLM's ``ngram`` and ``suffix`` drafters would accept.

Given a prompt and the target's greedy continuation, greedy speculative decoding is simulated with a
model-free drafter, so its accept lengths are known without running any model: each cycle the
drafter sees prompt + committed tokens and proposes up to k tokens; the verifier accepts the longest
prefix equal to the continuation plus one bonus token. Accept lengths count the bonus (README
"Accept length"); the prefill's first token belongs to no cycle; the last cycle's tokens beyond
``max_new_tokens`` are counted in its accept length. Draft tokens past the end of ``continuation``
count as rejected, so give a continuation of at least ``max_new_tokens + k`` tokens for an exact
last cycle.

ngram (prompt-lookup decoding), as in vLLM v1 ``vllm/v1/spec_decode/ngram_proposer.py``
(``_find_longest_matched_ngram_and_propose_tokens``, read at vllm-project/vllm commits 016e8ede
and adce4e9a: the rule is the same in both). Context = prompt + committed tokens, length T:

- n is the longest length in [prompt_lookup_min, prompt_lookup_max] whose last-n-token suffix
  occurs earlier, at a start s <= T - 1 - n (not the suffix itself; it may overlap the suffix);
- among the occurrences of that n-gram the earliest (smallest s) is taken;
- the proposal is context[s + n : s + n + k]: fewer than k tokens when the context ends sooner (it
  may run into the suffix itself);
- no such n (or T < prompt_lookup_min): no proposal, the cycle commits the bonus token only.
Not modelled: vLLM's cap k <= max_model_len - T (assumed never binding).

suffix (Suffix Decoding), as vLLM's ``vllm/v1/spec_decode/suffix_decoding.py`` (PR #25784)
calls Arctic Inference's ``SuffixDecodingCache`` (``arctic_inference/suffix_decoding/cache.py`` and
``csrc/suffix_decoding/suffix_tree.cc``, read in the arctic-inference 0.1.1 sdist that vLLM's
config asks for; both files are identical at tags v0.1.0, v0.1.2, v0.2.0 and commit 9d46438).
The suffix tree is a compressed trie of every substring of at most ``max_tree_depth`` tokens, with
count(x) = the number of occurrences of x; it is modelled uncompressed here, which gives the same
counts and child order. There are two trees: a local one over this request's prompt + response, and
a global one over the responses (not prompts) of cached requests, this request's own included. The
context vLLM passes is prompt + committed tokens (its model runner writes the sampled tokens into
``token_ids_cpu`` before proposing). A proposal:

- the pattern is the last min(T, max_tree_depth) tokens; match lengths m = 1, 2, ...,
  len(pattern) - 1 are tried in order (never the whole pattern), stopping at the first m-token
  suffix absent from the tree;
- for each m a single path (vLLM never asks for a tree) is drafted from the m-token suffix's node:
  step to the child listed first (highest count), prob *= count(child) / count(node), stop before a
  token whose prob < min_token_prob, at a leaf, or after min(k, int(m * max_spec_factor + 1e-6))
  tokens; the score is the sum of the tokens' probs, in float32 as in the C++;
- the highest score wins, a later (longer) m winning ties, then the local tree's draft wins over
  the global one unless the global score is strictly higher.
Children of equal count are ordered as the C++ sibling list orders them: a new child goes last; a
child whose count rises from c to c + 1 stays put if it is first or its predecessor's count exceeds
c + 1, and otherwise moves in front of the first sibling that has its predecessor's count.
Uncertain or not modelled: (1) ``SuffixCache`` serves requests one after another; under concurrency
vLLM's global tree also holds the other in-flight responses so far, which changes counts and order;
(2) FIFO eviction past ``suffix_decoding_max_cached_requests`` (default 10000) is not modelled;
(3) a request's last cycle is added to the global tree untrimmed, assuming vLLM's proposer sees the
final step's sampled tokens before the request leaves the batch; (4) vLLM's cap
k <= max_model_len - T - 1 is not modelled.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import numpy as np


class Drafter(Protocol):
    """One request's model-free drafter: fed the committed tokens, asked for a proposal."""

    def extend(self, tokens: Sequence[int]) -> None: ...

    def propose(self) -> list[int]: ...


# --- ngram ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ngram:
    """vLLM's ``ngram`` method: prompt_lookup_min, prompt_lookup_max, num_speculative_tokens."""

    prompt_lookup_min: int
    prompt_lookup_max: int
    num_speculative_tokens: int

    def __post_init__(self) -> None:
        if not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            raise ValueError("need 1 <= prompt_lookup_min <= prompt_lookup_max")
        if self.num_speculative_tokens < 1:
            raise ValueError("num_speculative_tokens must be >= 1")

    def start(self, prompt: Sequence[int]) -> NgramDrafter:
        drafter = NgramDrafter(self)
        drafter.extend(prompt)
        return drafter


class NgramDrafter:
    """Prompt lookup over a growing context, with each n-gram's earliest start indexed once.

    The context only grows, so an n-gram's earliest start never changes: indexing each new n-gram on
    arrival makes a proposal cost O(max_n) dict look-ups instead of a scan of the whole context.
    """

    def __init__(self, config: Ngram) -> None:
        self.config = config
        self.context: list[int] = []
        self._first: dict[int, dict[tuple[int, ...], int]] = {
            n: {} for n in range(config.prompt_lookup_min, config.prompt_lookup_max + 1)
        }
        self._indexed_ends = 0

    def extend(self, tokens: Sequence[int]) -> None:
        self.context.extend(int(t) for t in tokens)
        self._index()

    def _index(self) -> None:
        """Index the n-grams ending before the last token (so never the suffix itself)."""
        ctx = self.context
        for end in range(self._indexed_ends, len(ctx) - 1):
            for n, first in self._first.items():
                start = end - n + 1
                if start >= 0:
                    first.setdefault(tuple(ctx[start : end + 1]), start)
        self._indexed_ends = max(self._indexed_ends, len(ctx) - 1)

    def propose(self) -> list[int]:
        ctx, cfg = self.context, self.config
        for n in range(cfg.prompt_lookup_max, cfg.prompt_lookup_min - 1, -1):
            start = self._first[n].get(tuple(ctx[-n:])) if n < len(ctx) else None
            if start is not None:
                return ctx[start + n : start + n + cfg.num_speculative_tokens]
        return []


# --- suffix decoding -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Suffix:
    """vLLM's ``suffix`` method options (defaults are vLLM's; k defaults to the tree depth)."""

    num_speculative_tokens: int = 24
    max_tree_depth: int = 24
    max_spec_factor: float = 1.0
    min_token_prob: float = 0.1
    global_cache: bool = True  # False: suffix_decoding_max_cached_requests=0

    def __post_init__(self) -> None:
        if self.num_speculative_tokens < 1 or self.max_tree_depth < 1:
            raise ValueError("num_speculative_tokens and max_tree_depth must be >= 1")


class _Node:
    """Uncompressed trie node: occurrence count and children, ordered as the C++ sibling list."""

    __slots__ = ("token", "count", "children", "order")

    def __init__(self, token: int) -> None:
        self.token = token
        self.count = 0
        self.children: dict[int, _Node] = {}
        self.order: list[_Node] = []


def _bump(parent: _Node, child: _Node, is_root: bool) -> None:
    """Count one more occurrence of ``child``, moving it in its siblings as the C++ does."""
    c = child.count
    child.count = c + 1
    if is_root:  # the root's child order is never read (no draft starts at the root)
        return
    order = parent.order
    i = order.index(child)
    if i == 0 or order[i - 1].count > c + 1:
        return
    group_count = order[i - 1].count
    head = next(j for j, node in enumerate(order) if node.count == group_count)
    order.pop(i)
    order.insert(head, child)


class _Trie:
    """Substrings of at most ``depth`` tokens of several sequences, with occurrence counts."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.root = _Node(-1)
        self._active: dict[int, deque[_Node]] = {}

    def append(self, seq: int, token: int) -> None:
        """Extend sequence ``seq`` by one token: every suffix of < depth tokens grows by it."""
        active = self._active.setdefault(seq, deque())
        active.append(self.root)
        if len(active) > self.depth:
            active.popleft()
        for i in range(len(active)):
            node = active[i]
            child = node.children.get(token)
            if child is None:
                child = node.children[token] = _Node(token)
                child.count = 1
                if node is not self.root:
                    node.order.append(child)
            else:
                _bump(node, child, node is self.root)
            active[i] = child

    def find(self, tokens: Sequence[int]) -> _Node | None:
        node: _Node | None = self.root
        for t in tokens:
            node = node.children.get(t)
            if node is None:
                return None
        return node

    def speculate(
        self, pattern: Sequence[int], k: int, factor: float, min_prob: float
    ) -> tuple[list[int], np.float32]:
        """Best single-path draft over match lengths 1 .. len(pattern) - 1: (tokens, score)."""
        best: tuple[list[int], np.float32] = ([], np.float32(0.0))
        for m in range(1, len(pattern)):
            node = self.find(pattern[len(pattern) - m :])
            if node is None:
                break
            limit = max(0, min(k, int(float(np.float32(m) * np.float32(factor)) + 1e-6)))
            draft = _path(node, limit, np.float32(min_prob))
            if draft[1] >= best[1]:
                best = draft
        return best


def _path(node: _Node, limit: int, min_prob: np.float32) -> tuple[list[int], np.float32]:
    """Follow the first-listed child while the running probability stays >= min_prob."""
    tokens: list[int] = []
    prob, score = np.float32(1.0), np.float32(0.0)
    while len(tokens) < limit and node.order:
        child = node.order[0]
        prob = np.float32(prob * (np.float32(child.count) / np.float32(node.count)))
        if prob < min_prob:
            break
        tokens.append(child.token)
        score = np.float32(score + prob)
        node = child
    return tokens, score


@dataclass
class SuffixCache:
    """vLLM's suffix-decoding state for requests served one after another.

    The global tree persists across ``start`` calls, as in a vLLM server; ``add_response`` caches
    a response of an earlier request (one not simulated here).
    """

    config: Suffix = field(default_factory=Suffix)
    _global: _Trie = field(init=False)
    _seqs: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self._global = _Trie(self.config.max_tree_depth)

    def _new_seq(self) -> int:
        self._seqs += 1
        return self._seqs - 1

    def add_response(self, tokens: Sequence[int]) -> None:
        if self.config.global_cache:
            seq = self._new_seq()
            for t in tokens:
                self._global.append(seq, int(t))

    def start(self, prompt: Sequence[int]) -> SuffixDrafter:
        return SuffixDrafter(self, prompt)


class SuffixDrafter:
    """One request: a local tree over prompt + response, its response also fed to the global one."""

    def __init__(self, cache: SuffixCache, prompt: Sequence[int]) -> None:
        self.cache = cache
        self.config = cache.config
        self.context = [int(t) for t in prompt]
        self._local = _Trie(self.config.max_tree_depth)
        for t in self.context:
            self._local.append(0, t)
        self._seq = cache._new_seq() if self.config.global_cache else None

    def extend(self, tokens: Sequence[int]) -> None:
        for t in tokens:
            t = int(t)
            self.context.append(t)
            self._local.append(0, t)
            if self._seq is not None:
                self.cache._global.append(self._seq, t)

    def propose(self) -> list[int]:
        cfg = self.config
        pattern = self.context[-cfg.max_tree_depth :]
        args = (pattern, cfg.num_speculative_tokens, cfg.max_spec_factor, cfg.min_token_prob)
        local = self._local.speculate(*args)
        glob = self.cache._global.speculate(*args)
        return local[0] if local[1] >= glob[1] else glob[0]


# --- the measurement -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Acceptance:
    """Per-cycle accept lengths (bonus included) of one prompt, and how many tokens each cycle drafted
    (what its verify pass costs: the bonus position plus the drafts)."""

    accept_lengths: tuple[int, ...]
    drafted: tuple[int, ...] = ()

    @property
    def mean_accept_length(self) -> float:
        n = len(self.accept_lengths)
        return sum(self.accept_lengths) / n if n else math.nan


@dataclass(frozen=True)
class Assessment:
    """Accept lengths over many prompts; the mean is over all their cycles."""

    results: tuple[Acceptance, ...]

    @property
    def mean_accept_length(self) -> float:
        lengths = tuple(a for r in self.results for a in r.accept_lengths)
        return Acceptance(lengths).mean_accept_length


def simulate(
    prompt: Sequence[int],
    continuation: Sequence[int],
    start: Callable[[Sequence[int]], Drafter],
    max_new_tokens: int,
    eos: frozenset[int] = frozenset(),
) -> Acceptance:
    """Greedy speculative decoding of ``continuation`` with the drafter ``start(prompt)`` gives.

    Decoding stops where the decoder would (:func:`draftlab.probe.walk.decoder_walk`): at once when the
    first token is an ``eos`` token, else after the cycle that commits one."""
    if not 1 <= max_new_tokens <= len(continuation):
        raise ValueError("need 1 <= max_new_tokens <= len(continuation)")
    lengths: list[int] = []
    drafted: list[int] = []
    if continuation[0] in eos:
        return Acceptance((), ())
    drafter = start(prompt)
    drafter.extend(continuation[:1])
    pos = 1
    while pos < max_new_tokens:
        draft = drafter.propose()
        accepted = _accepted(draft, continuation, pos)
        lengths.append(accepted + 1)
        drafted.append(len(draft))
        committed = continuation[pos : pos + accepted + 1]
        drafter.extend(committed)
        if any(t in eos for t in committed[: max_new_tokens - pos]):
            break
        pos += accepted + 1
    return Acceptance(tuple(lengths), tuple(drafted))


def _accepted(draft: Sequence[int], continuation: Sequence[int], pos: int) -> int:
    """Length of the draft's longest prefix equal to continuation[pos:]."""
    n = 0
    while n < len(draft) and pos + n < len(continuation) and draft[n] == continuation[pos + n]:
        n += 1
    return n


def assess(
    prompts: Sequence[Sequence[int]],
    continuations: Sequence[Sequence[int]],
    start: Callable[[Sequence[int]], Drafter],
    max_new_tokens: int | Sequence[int],
    eos: frozenset[int] = frozenset(),
) -> Assessment:
    """``simulate`` every prompt in order (``SuffixCache.start`` caches the earlier responses);
    ``max_new_tokens`` is one for all prompts or one per prompt."""
    if len(prompts) != len(continuations):
        raise ValueError("prompts and continuations differ in number")
    limits = [max_new_tokens] * len(prompts) if isinstance(max_new_tokens, int) else list(max_new_tokens)
    return Assessment(
        tuple(simulate(p, c, start, n, eos) for p, c, n in zip(prompts, continuations, limits))
    )
