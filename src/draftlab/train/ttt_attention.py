"""The TTT attention without n x n float32 scores.

At TTT step i the query of row j attends to step 0's keys 0..j (causal, right padding masked) and,
for each step l = 1..i, to the one key step l made at row j (the "diagonal"). A sliding-window drafter's
query (at position j + i) drops every key W or more positions behind it: step 0's keys r <= j + i - W and,
were W no longer than the steps, step l's when i - l >= W. That is the window by position, as the engines
serve it (vLLM's attention, draftlab's decoder); speculators' own TTT mask (``create_combined_mask_mod``)
counts the distance in rows instead (j - r < W at every step) and keeps every diagonal key, so from step 1
on it lets a query see i more keys than the served drafter does. The keys and values of
every step sit in one tensor of ``length`` slots, each ``stride`` rows: n rounded up to a power of two
(at least :data:`BLOCK`), so every slot starts on a block boundary and the compiled flex kernel meets
one shape per power of two however ragged the batch widths are (the rows past n are never computed,
they only take memory). Slots after the current step hold zeros and are never read. One layout serves
every step.

Two kernels compute the same function:

- ``flex``: torch's flex attention with a block mask built from block indices (the causal blocks of
  slot 0, the diagonal block of each earlier slot; nothing n x n is ever made). CUDA only: flex has no
  CPU backward, and its Triton kernels need heads of at least 16 dims.
- ``blocked``: queries a chunk at a time against the keys up to the chunk's end, each chunk recomputed
  in the backward (``torch.utils.checkpoint``), so at most one chunk's scores exist at once. Runs
  anywhere; the exact reference the flex kernel is tested against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

BLOCK = 128  # flex attention's sparse block size
CHUNK = 1024  # query rows per chunk of the blocked kernel


@dataclass
class TTTLayout:
    """Where each step's keys sit, and which of step 0's keys a row may attend."""

    n: int  # query rows
    stride: int  # rows per slot: n rounded up to a power of two, at least BLOCK
    length: int  # slots: TTT steps
    valid: torch.Tensor  # [B, stride] bool: step 0's attendable keys (False on right padding and past n)
    window: int | None = None  # the drafter's sliding window (None: full attention)
    _masks: dict = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, attention_mask: torch.Tensor, length: int, window: int | None = None) -> TTTLayout:
        """From the batch's attention mask [B, n] (False on right padding) and the drafter's window."""
        n = attention_mask.shape[1]
        stride = max(BLOCK, 1 << (n - 1).bit_length())
        return cls(n, stride, length, F.pad(attention_mask.bool(), (0, stride - n), value=False), window)

    @property
    def reach(self) -> int:
        """Keys less than this many positions behind a query are seen: the window, else farther than any key."""
        return self.window if self.window is not None else self.stride + self.length

    def pad(self, t: torch.Tensor) -> torch.Tensor:
        """One step's queries, keys or values [B, h, n, D] -> [B, h, stride, D] (zero rows after n)."""
        return t if self.stride == self.n else F.pad(t, (0, 0, 0, self.stride - self.n))

    def stack(self, slots: list[torch.Tensor]) -> torch.Tensor:
        """The padded keys (or values) of steps 0..i -> [B, h, length * stride, D], later slots zero."""
        first = slots[0]
        rest = (self.length - len(slots)) * self.stride
        zeros = first.new_zeros(first.shape[0], first.shape[1], rest, first.shape[3])
        return torch.cat([*slots, zeros], dim=2)

    def block_mask(self, step: int):
        """Flex attention's block mask for ``step``, over queries padded to ``stride`` rows (built once per
        step and batch)."""
        if step not in self._masks:
            self._masks[step] = _block_mask(self, step)
        return self._masks[step]


def ttt_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, step: int, layout: TTTLayout,
                  scale: float | None, kernel: str) -> torch.Tensor:
    """q [B, H, n, D] over ``layout.stack``-ed keys/values [B, Hkv, length * stride, D] at ``step``;
    returns [B, H, n, D]. ``kernel``: "flex" or "blocked" (the module docstring)."""
    if kernel == "flex":
        with torch.autocast(q.device.type, enabled=False):  # q, k, v already share autocast's dtype
            out = compiled_flex()(layout.pad(q), keys, values, block_mask=layout.block_mask(step), scale=scale,
                                  enable_gqa=q.shape[1] != keys.shape[1])
        return out if layout.stride == layout.n else out[:, :, :layout.n]
    return _blocked(q, keys, values, step, layout, scale)


@cache
def compiled_flex():
    """flex_attention through torch.compile (it has no fast eager kernel); compiled once per process, then
    once per power-of-two width (the recompile limit is raised to leave room for them, as SpecForge does)."""
    from torch.nn.attention.flex_attention import flex_attention

    config = torch._dynamo.config
    if hasattr(config, "recompile_limit"):
        config.recompile_limit = max(config.recompile_limit, 64)
    return torch.compile(flex_attention)


# --- flex ---------------------------------------------------------------------------------------------

def mask_mod_for(layout: TTTLayout, step: int):
    """The element-level rule: slot 0 causal over valid keys, slots 1..step only the query's own row, each
    within the window (a key at row r of slot s sits at position r + s, the query at q + step). Inside the
    blocks :func:`block_lists` marks partial it is what flex applies (the block lists
    already leave out everything else). It reads tensors only, no per-batch or per-step constants, so a
    new batch or step of the same width reuses the compiled kernel."""
    device = layout.valid.device
    kv = torch.arange(layout.length * layout.stride, device=device)
    slot_of, row_of, valid = kv // layout.stride, kv % layout.stride, layout.valid
    last, reach = torch.tensor(step, device=device), torch.tensor(layout.reach, device=device)

    def mask_mod(b, h, q_idx, kv_idx):
        slot, row = slot_of[kv_idx], row_of[kv_idx]
        near = q_idx + last - row - slot < reach
        return near & (((slot == 0) & (row <= q_idx) & valid[b, row]) | ((slot > 0) & (slot <= last) & (row == q_idx)))

    return mask_mod


def block_lists(layout: TTTLayout, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-level [B, q blocks, kv blocks] bool: blocks flex computes with the mask (partial) and
    without it (full, every element allowed). Slot 0: earlier blocks with every key valid and within the
    window are full, those with some valid keys some of which lie within it partial, the diagonal block
    partial; slots 1..step: the diagonal block, where the window reaches that slot."""
    b = layout.valid.shape[0]
    nq = layout.stride // BLOCK
    blocks = layout.valid.view(b, nq, BLOCK)
    some, every = blocks.any(-1), blocks.all(-1)  # [B, kv blocks of slot 0]
    device = layout.valid.device
    r = torch.arange(nq, device=device)
    live = (r < -(-layout.n // BLOCK))[:, None]  # query blocks holding real rows; the others compute nothing
    below = (r[:, None] > r[None, :]) & live  # kv block strictly before the query block
    diag = torch.eye(nq, dtype=torch.bool, device=device) & live
    apart = (r[:, None] - r[None, :]) * BLOCK + step  # the blocks' nearest and farthest (query, key) distances
    reached, inside = apart - (BLOCK - 1) < layout.reach, apart + (BLOCK - 1) < layout.reach
    full0 = below[None] & every[:, None, :] & inside[None]
    partial0 = ((below[None] & some[:, None, :]) | (diag[None] & some[:, None, :])) & reached[None] & ~full0
    unused = torch.zeros(b, nq, nq, dtype=torch.bool, device=device)
    later = [diag[None].expand(b, nq, nq) if step - s < layout.reach else unused for s in range(1, step + 1)]
    partial = torch.cat([partial0] + later + [unused] * (layout.length - 1 - step), dim=2)
    full = torch.cat([full0] + [unused] * (layout.length - 1), dim=2)
    return partial, full


def _indices(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, Q, K] bool -> (count [B, 1, Q], indices [B, 1, Q, K]) int32, listed blocks first, ascending."""
    count = blocks.sum(-1, dtype=torch.int32)
    order = torch.argsort((~blocks).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    return count[:, None], order[:, None]


def _block_mask(layout: TTTLayout, step: int):
    from torch.nn.attention.flex_attention import BlockMask

    partial, full = block_lists(layout, step)
    count, indices = _indices(partial)
    full_count, full_indices = _indices(full)
    return BlockMask.from_kv_blocks(kv_num_blocks=count, kv_indices=indices, full_kv_num_blocks=full_count,
                                    full_kv_indices=full_indices, BLOCK_SIZE=BLOCK,
                                    mask_mod=mask_mod_for(layout, step),
                                    seq_lengths=(layout.stride, layout.length * layout.stride))


# --- blocked ------------------------------------------------------------------------------------------

def _blocked(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, step: int, layout: TTTLayout,
             scale: float | None, chunk: int | None = None) -> torch.Tensor:
    """The exact softmax over [causal scores, diagonal scores], ``chunk`` (default :data:`CHUNK`) query
    rows at a time."""
    chunk = chunk or CHUNK
    parts = []
    for start in range(0, layout.n, chunk):
        end = min(start + chunk, layout.n)
        args = (q[:, :, start:end], keys, values, layout.valid, start, step, layout.stride, scale, layout.reach)
        if torch.is_grad_enabled() and (q.requires_grad or keys.requires_grad or values.requires_grad):
            parts.append(checkpoint(_chunk, *args, use_reentrant=False))
        else:
            parts.append(_chunk(*args))
    return torch.cat(parts, dim=2)


def _chunk(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, valid: torch.Tensor, start: int, step: int,
           stride: int, scale: float | None, reach: int) -> torch.Tensor:
    """Rows start..start+c of the queries [B, H, c, D]: step 0's keys 0..end (causal, valid) and the
    diagonal key of each slot 1..step, those less than ``reach`` positions behind the query. Query heads
    are folded onto their kv head (no repeated keys)."""
    b, heads, c, d = q.shape
    kv_heads = keys.shape[1]
    end = start + c
    scale = d ** -0.5 if scale is None else scale
    qg = q.reshape(b, kv_heads, heads // kv_heads, c, d)
    scores = torch.matmul(qg, keys[:, :, None, :end].transpose(-1, -2)) * scale  # [B, Hkv, g, c, end]
    rows = torch.arange(start, end, device=q.device)
    behind = rows[:, None] + step - torch.arange(end, device=q.device)[None]  # query position - key position
    allowed = ((behind >= step) & (behind < reach))[None] & valid[:, None, :end]
    scores = scores.masked_fill(~allowed[:, None, None], torch.finfo(scores.dtype).min)
    diagonal = [(qg * keys[:, :, None, s * stride + start:s * stride + end]).sum(-1, keepdim=True) * scale
                if step - s < reach else torch.full_like(scores[..., :1], torch.finfo(scores.dtype).min)
                for s in range(1, step + 1)]
    weights = torch.cat([scores, *diagonal], dim=-1).softmax(-1, dtype=torch.float32).to(q.dtype)
    out = torch.matmul(weights[..., :end], values[:, :, None, :end])
    for s in range(1, step + 1):
        out = out + weights[..., end + s - 1:end + s] * values[:, :, None, s * stride + start:s * stride + end]
    return out.reshape(b, heads, c, values.shape[-1])
