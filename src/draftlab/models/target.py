"""The target model as speculative decoding needs it: logits plus aux hidden states, over a KV cache
that can verify a draft tree in one pass and then keep only the accepted path.

Aux capture follows the canonical convention (``draftlab.engines``): aux layer k is the OUTPUT of
decoder layer k, before the final norm. (HF's ``hidden_states[k + 1]`` is the same tensor except for
the last layer, whose HF entry is post-norm.) An HF pass captures it by forward hooks that live only
for that pass; the static step returns the aux layers itself, with no hooks in its graphs' way.
A runner made with ``final_hidden`` hands the drafter the final (post-norm) hidden state instead, the
lm_head's input, which a target's own MTP head reads (:mod:`draftlab.models.mtp`); it runs the dynamic cache.

The model is any Hugging Face causal LM loaded through ``AutoModelForCausalLM``. Tree verification
passes transformers a ready 4D additive mask (``masking_utils`` returns a 4D mask as it is, for
eager and sdpa alike) and explicit ``position_ids``; models whose layers mix full and
sliding-window attention get one mask per layer type.

Two caches, one interface (``forward``, ``keep``, ``crop``): ``"dynamic"``, the eager reference path
above (CPU, tests, every family), and ``"static"`` (:mod:`draftlab.models.target_static`): a
preallocated cache of ``max_len`` entries, steps of up to 64 tokens replayed as CUDA graphs per
token-count bucket, optionally compiled. ``"auto"`` picks static on CUDA for the families it supports.
``forward_batch`` (the probe's cache-free pass over many sequences) works in both modes, so one
loaded model serves decoding and probing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import DynamicCache, PreTrainedModel

from draftlab.checkpoint import TargetConfig
from draftlab.engines import default_aux_layers
from draftlab.engines.mtp_head import deepseek_mtp_prefixes
from draftlab.errors import DraftlabError
from draftlab.models.devices import model_devices, offloaded, parse_device, parse_dtype
from draftlab.models.fused_layer import fusable
from draftlab.models.kernels import attention_kernels
from draftlab.models.masks import apply_window, attention_mask, new_token_mask, to_additive
from draftlab.models.target_static import LayerWalk, StaticTarget, cache_keyword, supports

CACHES = ("auto", "dynamic", "static")
DEFAULT_MAX_LEN = 4096
STATIC_BY_DEFAULT = ("cuda",)  # device types on which cache "auto" means static (tests add "cpu")


@dataclass
class TargetStep:
    logits: torch.Tensor  # [n, V] float32
    aux: torch.Tensor  # [n, len(aux_layers) * hidden], model dtype, concatenated low to high


@dataclass
class BatchStep:
    hidden: torch.Tensor  # [B, L, hidden] the final (post-norm) hidden state, the lm_head's input, on the
    # final norm's device (a split target's last GPU: move it to the lm_head's device, not to ``device``)
    aux: torch.Tensor  # [B, L, len(aux_layers) * hidden], model dtype, concatenated low to high, on ``device``


def static_by_default(device: torch.device) -> bool:
    """Whether cache "auto" means static on ``device`` (for the families the static runtime supports)."""
    return device.type in STATIC_BY_DEFAULT


def static_len(context: int | None, max_len: int | None = None) -> int:
    """Entries a static cache holds: ``max_len`` (default :data:`DEFAULT_MAX_LEN`), at most the context
    (entries past it never fill: forward refuses those positions)."""
    wanted = DEFAULT_MAX_LEN if max_len is None else max_len
    return wanted if context is None else min(wanted, context)


class TargetRunner:
    """Runs one sequence (batch size 1) of a target model over its own KV cache."""

    def __init__(self, model: PreTrainedModel, *, aux_layers: list[int] | None = None, cache: str = "auto",
                 max_len: int | None = None, graphs: bool | None = None, compile: bool = False,
                 final_hidden: bool = False) -> None:
        """``cache``: "dynamic", "static" or "auto" (static on CUDA when the family supports it).
        Static only: ``max_len`` cached entries (default 4096; at most the context), ``graphs`` CUDA
        graphs per bucket (default on CUDA), ``compile`` the fused layers' elementwise parts through
        torch.compile in the bucketed steps (see :class:`StaticTarget`). ``final_hidden``: the steps' ``aux``
        is the final norm's output [n, hidden] instead of the aux layers (none are captured)."""
        if cache not in CACHES:
            raise DraftlabError(f"unknown cache {cache!r}; choose {', '.join(CACHES)}")
        self.model = model.eval()
        self.config = TargetConfig.from_dict(model.config.to_dict())
        n_layers = len(model.get_decoder().layers)
        self.final_hidden = final_hidden
        if final_hidden:
            aux_layers = []
            if cache == "static":
                raise DraftlabError("the final hidden state is captured with the dynamic cache (cache auto or dynamic)")
            cache = "dynamic"
        self.aux_layers = list(aux_layers) if aux_layers is not None else default_aux_layers(n_layers)
        bad = [k for k in self.aux_layers if not 0 <= k < n_layers]
        if bad:
            raise DraftlabError(f"aux layer {bad[0]} does not exist: the target has decoder layers 0..{n_layers - 1}")
        self.eos_token_ids = _eos_ids(model)
        self.device = model.get_input_embeddings().weight.device
        self.dtype = model.get_input_embeddings().weight.dtype
        self._windows = _layer_windows(model.config, n_layers)
        self.cache_arg = cache_keyword(model.forward)
        on_cuda = self.device.type == "cuda"
        one_device = len(model_devices(model)) == 1  # not split by a device map
        if cache == "auto":
            static = static_by_default(self.device) and one_device and supports(model)
            cache = "static" if static else "dynamic"
        if cache == "static" and not one_device:
            raise DraftlabError("the static cache needs the whole target on one device; a target split by a "
                                "device map runs with the dynamic cache (cache auto or dynamic)")
        self.cache = cache
        self._static: StaticTarget | None = None
        self._walk: LayerWalk | None = None  # the cache-free fused walk, made by the first forward_batch
        if cache == "static":
            if graphs and not on_cuda:
                raise DraftlabError("CUDA graphs need the target on a CUDA device")
            if max_len is not None and max_len < 1:
                raise DraftlabError(f"max_len must be >= 1; got {max_len}")
            max_len = static_len(self.config.max_position_embeddings, max_len)
            self._static = StaticTarget(model, self.aux_layers, self._windows, max_len=max_len,
                                        graphs=on_cuda if graphs is None else graphs, compile=compile)
        self.reset()

    @classmethod
    def load(cls, path: str | Path, *, aux_layers: list[int] | None = None, dtype: str = "float32",
             device: str = "cpu", device_map: str | None = None, trust_remote_code: bool = False,
             cache: str = "auto", max_len: int | None = None, graphs: bool | None = None,
             compile: bool = False, final_hidden: bool = False) -> TargetRunner:
        """Load a local Hugging Face folder (never the network): onto ``device``, or split across the GPUs
        by ``device_map`` (e.g. "auto", through accelerate; ``device`` is then unused). A split target
        takes its inputs on the device of its input embedding (``self.device``) and returns there."""
        from transformers import AutoModelForCausalLM

        path = Path(path)
        if not (path / "config.json").is_file():
            raise DraftlabError("is not a model folder (no config.json)", path=path)
        torch_dtype = parse_dtype(dtype)
        kwargs = {"device_map": device_map} if device_map else {}
        try:
            with _mtp_layers_expected(path, trust_remote_code):
                model = AutoModelForCausalLM.from_pretrained(
                    path, dtype=torch_dtype, local_files_only=True, trust_remote_code=trust_remote_code, **kwargs)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            hint = "" if trust_remote_code else " (if it needs its own modelling code, pass --trust-remote-code)"
            raise DraftlabError(f"cannot load as a causal LM: {first}{hint}", path=path) from None
        if not device_map:
            model.to(parse_device(device))
        elif spill := offloaded(getattr(model, "hf_device_map", {})):
            raise DraftlabError(f"does not fit on the GPUs: device map {device_map!r} put part of it on the {spill} "
                                "(offloaded weights would be streamed in every pass); use more GPUs or a smaller "
                                "--dtype", path=path)
        return cls(model, aux_layers=aux_layers, cache=cache, max_len=max_len, graphs=graphs, compile=compile,
                   final_hidden=final_hidden)

    @property
    def embed_tokens(self) -> torch.nn.Embedding:
        return self.model.get_input_embeddings()

    @property
    def lm_head(self) -> torch.nn.Module:
        return self.model.get_output_embeddings()

    def reset(self) -> None:
        """Empty the KV cache (start a new prompt)."""
        self._cache = DynamicCache()
        self._positions = torch.empty(0, dtype=torch.long, device=self.device)  # position of each cached entry
        self._last_new = 0

    @property
    def cache_len(self) -> int:
        return int(self._positions.numel())

    @property
    def max_len(self) -> int | None:
        """Entries the static cache holds; None for the dynamic cache, which grows."""
        return self._static.max_len if self._static is not None else None

    @property
    def static(self) -> StaticTarget | None:
        """The static cache's steps (None with the dynamic cache)."""
        return self._static

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, *, tree_mask: torch.Tensor | None = None,
                positions: torch.Tensor | None = None, max_position: int | None = None) -> TargetStep:
        """Run n new tokens (1-D LongTensor) after the cached prefix and append them to the cache.

        ``positions`` default to ``cache_len + arange(n)``; ``tree_mask`` [n, n] bool says which new
        tokens each new token may attend to (the cached prefix is always visible); None = causal.
        ``max_position``: a bound on ``positions`` the caller knows, checked against the context
        instead of their maximum, which would wait for the device (a verify queued behind its drafts).
        """
        input_ids = input_ids.reshape(-1).to(self.device)
        n = input_ids.numel()
        cached = self.cache_len
        if positions is None:  # the last position is known without reading the device back
            positions, last = torch.arange(cached, cached + n, device=self.device), cached + n - 1
        else:
            positions = positions.reshape(-1).to(self.device, torch.long)
            last = int(positions.max()) if max_position is None else max_position
        if positions.numel() != n:
            raise DraftlabError(f"got {positions.numel()} positions for {n} new tokens")
        limit = self.config.max_position_embeddings
        if limit is not None and last >= limit:
            raise DraftlabError(f"position {last} is past the target's context of {limit} tokens")
        key_positions = torch.cat([self._positions, positions])
        if self._static is not None:
            logits, aux = self._static.forward(input_ids, positions, new_token_mask(n, tree_mask, self.device), cached)
            self._positions = key_positions
            self._last_new = n
            return TargetStep(logits=logits, aux=aux)
        mask = self._mask(attention_mask(cached, tree_mask, n, self.device), positions, key_positions)
        with attention_kernels(), self._aux_hooks() as captured:
            out = self.model(input_ids=input_ids[None], position_ids=positions[None], attention_mask=mask,
                             use_cache=True, **{self.cache_arg: self._cache})
        self._positions = key_positions
        self._last_new = n
        aux = self.features(captured, out.logits)[0]
        return TargetStep(logits=out.logits[0].float().to(self.device), aux=aux)

    __call__ = forward

    @torch.no_grad()
    def forward_batch(self, input_ids: torch.Tensor, *, compiled: bool = False) -> BatchStep:
        """One cache-free causal pass over ``input_ids`` [B, L], leaving the KV cache alone.

        Rows may be right-padded: a pad after a row's real tokens is never attended by them. Logits
        are left to the caller (``lm_head`` over the hidden states, in chunks: [B, L, V] is large).
        Where the static cache runs by default (CUDA), the dense families walk their fused layers
        (:meth:`LayerWalk.causal`; ``compiled``: their elementwise parts through torch.compile, worth
        its compile time over many passes, as in training); otherwise the HF model runs on its own
        attention (in static mode too: the batch-1 static cache is left alone).
        """
        input_ids = input_ids.to(self.device)
        limit = self.config.max_position_embeddings
        if limit is not None and input_ids.shape[1] > limit:
            raise DraftlabError(f"{input_ids.shape[1]} tokens are past the target's context of {limit} tokens")
        walk = self._causal_walk(input_ids.shape[1])
        if walk is not None:
            hidden, aux = walk.causal(input_ids, compiled=compiled)
            return BatchStep(hidden=hidden, aux=aux)
        with self.hf_pass() as captured:
            out = self.model.get_decoder()(input_ids=input_ids, use_cache=False)
        return BatchStep(hidden=out.last_hidden_state, aux=self.features(captured, out.last_hidden_state))

    def features(self, captured: dict[int | str, torch.Tensor], out: torch.Tensor) -> torch.Tensor:
        """What the drafter reads from one HF pass whose output ``out`` is [B, L, ...], as [B, L, width] on
        ``device``: the aux layers' outputs, concatenated low to high (none captured, as in plain decoding: width
        0), or with ``final_hidden`` the final norm's output."""
        if self.final_hidden:
            return captured["final"].to(self.device)
        if not self.aux_layers:
            return torch.zeros(*out.shape[:2], 0, dtype=self.dtype, device=self.device)
        return torch.cat([captured[k].to(self.device) for k in self.aux_layers], dim=-1)

    def _causal_walk(self, length: int) -> LayerWalk | None:
        """The fused walk for a cache-free pass of ``length`` tokens, made once, when this runner's
        device takes the fast path by default and its model is one dense, SiLU-gated family on one
        device with no sliding window shorter than the pass; else None (the HF pass)."""
        if not static_by_default(self.device) or not supports(self.model) or not fusable(self.model) \
                or self.final_hidden:
            return None
        if any(window is not None and window < length for window in self._windows.values()):
            return None
        if self._walk is None:
            if len(model_devices(self.model)) != 1:
                return None
            self._walk = self._static.walk if self._static is not None else \
                LayerWalk(self.model, self.aux_layers, self._windows)
        return self._walk

    def keep(self, indices: Sequence[int] | torch.Tensor) -> None:
        """Of the entries the last forward appended, keep ``indices`` (in that order) right after the prefix.
        A leading run ``0, 1, ..., m - 1`` (a chain's accepted path) moves nothing: the cache is cut at it.
        The decoder passes its walk's host list, so nothing is read back from the device."""
        listed = indices.reshape(-1).tolist() if isinstance(indices, torch.Tensor) else list(indices)
        if any(not 0 <= i < self._last_new for i in listed):
            raise DraftlabError(f"keep() indices must lie in 0..{self._last_new - 1} (the last forward's entries)")
        start = self.cache_len - self._last_new
        if listed == list(range(len(listed))):
            self.crop(start + len(listed))
            self._last_new = len(listed)
            return
        indices = torch.tensor(listed, dtype=torch.long, device=self.device)
        full = torch.cat([torch.arange(start, device=self.device), start + indices])
        if self._static is not None:
            self._static.keep(start, indices)
        for layer in self._cache.layers:
            if layer.is_initialized and layer.keys.numel():
                idx = full.to(layer.keys.device)
                layer.keys = layer.keys.index_select(-2, idx)
                layer.values = layer.values.index_select(-2, idx)
        self._positions = self._positions.index_select(0, full)
        self._last_new = indices.numel()

    def crop(self, length: int) -> None:
        """Keep only the first ``length`` cached entries (drop everything after them)."""
        if not 0 <= length <= self.cache_len:
            raise DraftlabError(f"crop() length must lie in 0..{self.cache_len}; got {length}")
        for layer in self._cache.layers:
            if layer.is_initialized and layer.keys.numel():
                layer.keys, layer.values = layer.keys[..., :length, :], layer.values[..., :length, :]
        self._positions = self._positions[:length]
        self._last_new = 0

    def _mask(self, allowed: torch.Tensor, positions: torch.Tensor,
              key_positions: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        """The 4D additive mask, or one per layer type when full and sliding layers are mixed."""
        masks = {kind: to_additive(apply_window(allowed, positions, key_positions, window), self.dtype)
                 for kind, window in self._windows.items()}
        return next(iter(masks.values())) if len(masks) == 1 else masks

    @contextmanager
    def hf_pass(self) -> Iterator[dict[int, torch.Tensor]]:
        """A pass of the HF model on its own attention (in static mode too: the static cache is left
        alone) with the aux layers captured; yields their outputs by layer id once it ran."""
        own_attention = self._static.own_attention() if self._static is not None else nullcontext()
        with own_attention, attention_kernels(), self._aux_hooks() as captured:
            yield captured

    @contextmanager
    def _aux_hooks(self) -> Iterator[dict[int, torch.Tensor]]:
        """Forward hooks on the aux layers (with ``final_hidden``, on the final norm, as "final") for one HF
        pass; yields their outputs by layer id once it ran."""
        captured: dict[int | str, torch.Tensor] = {}
        decoder = self.model.get_decoder()
        modules = [(k, decoder.layers[k]) for k in sorted(set(self.aux_layers))]
        if self.final_hidden:
            modules.append(("final", decoder.norm))

        def record(k: int | str):
            def hook(module: torch.nn.Module, args: object, output: object) -> None:
                captured[k] = output[0] if isinstance(output, tuple) else output
            return hook

        handles = [module.register_forward_hook(record(k)) for k, module in modules]
        try:
            yield captured
        finally:
            for handle in handles:
                handle.remove()


def _layer_windows(config: object, n_layers: int) -> dict[str, int | None]:
    """Sliding window (None = full attention) of each layer type the model uses."""
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if not layer_types:
        return {"all": window}
    unknown = sorted(set(layer_types) - {"full_attention", "sliding_attention"})
    if unknown:
        raise DraftlabError(f"target layer type {unknown[0]!r} is not supported by the reference runner")
    return {kind: (window if kind == "sliding_attention" else None) for kind in dict.fromkeys(layer_types[:n_layers])}


def _eos_ids(model: PreTrainedModel) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return ids


@contextmanager
def _mtp_layers_expected(path: Path, trust_remote_code: bool) -> Iterator[None]:
    """While loading ``path``: its DeepSeek-style MTP layers (``model.layers.L+i.``, past its L decoder layers),
    which the causal LM does not hold and the MTP head loads apart, count as expected keys. transformers names
    them by the released models' depths (DeepSeek-V3's layer 61, GLM-4.5's 92 and 46), so a target of another
    depth (a toy, a resized variant) printed every MTP tensor as UNEXPECTED on each load. Unknown or
    remote-code classes load as they are."""
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, AutoConfig

    config = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
    layers, count = getattr(config, "num_hidden_layers", None), getattr(config, "num_nextn_predict_layers", 0) or 0
    kind = None if trust_remote_code else MODEL_FOR_CAUSAL_LM_MAPPING.get(type(config), None)
    if kind is None or not isinstance(layers, int) or count < 1:
        yield
        return
    own = kind.__dict__.get("_keys_to_ignore_on_load_unexpected")
    mtp_layers = "|".join(map(re.escape, deepseek_mtp_prefixes(layers, count)))
    kind._keys_to_ignore_on_load_unexpected = [*(kind._keys_to_ignore_on_load_unexpected or []), f"^({mtp_layers})"]
    try:
        yield
    finally:
        if own is None:
            del kind._keys_to_ignore_on_load_unexpected
        else:
            kind._keys_to_ignore_on_load_unexpected = own
