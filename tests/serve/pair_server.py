"""A real ``draftlab serve`` HTTP server over the real speculative decoder, on a tiny synthetic pair.

The pair is the decode tests' table model (tests/decode/spec_fakes.py): the real SpeculativeDecoder
runs on it with non-trivial acceptance, in milliseconds. Token text is the ids themselves (a
whitespace "tokenizer"), so the OpenAI endpoints stream visible text too. Run as a script to get
a server in its own process (it prints its port).
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "decode"))

from spec_fakes import make_pair  # noqa: E402

from draftlab.decode.decoder import SpeculativeDecoder  # noqa: E402
from draftlab.engines.sglang_flags import resolve_spec_flags  # noqa: E402
from draftlab.serve.engine import ServeEngine  # noqa: E402
from draftlab.serve.http import ServeContext, make_server  # noqa: E402

VOCAB = 12
EOS = 11


class IdTokenizer:
    """Text is space-separated token ids: enough for the OpenAI endpoints' text fields."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [int(t) % VOCAB for t in text.split()] or [0]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(f" {i}" for i in ids)

    def apply_chat_template(self, messages, **_kw) -> list[int]:
        return [t for m in messages for t in self.encode(m["content"])]


def build_context(*, drafted: bool, steps: int = 3, topk: int = 1, ndt: int = 4, seed: int = 3,
                  context: int | None = None) -> ServeContext:
    target, drafter = make_pair(VOCAB, seed=seed, eos={EOS}, context=context)
    flags = resolve_spec_flags(steps, topk, ndt) if drafted else None
    decoder = SpeculativeDecoder(target, drafter if drafted else None, flags)
    engine = ServeEngine(decoder, steps=flags.steps if flags else None,
                         num_draft_tokens=flags.num_draft_tokens if flags else None)
    spec = {"num_steps": steps, "eagle_topk": topk, "num_draft_tokens": ndt} if drafted else None
    return ServeContext(engine, IdTokenizer(), "toy-table", "toy-table", spec, {EOS}, context, VOCAB)


def start(ctx: ServeContext):
    """Serve on a free loopback port in a daemon thread; returns (server, base_url)."""
    server = make_server(ctx, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


if __name__ == "__main__":
    srv = make_server(build_context(drafted=True), "127.0.0.1", 0)
    print(srv.server_address[1], flush=True)
    srv.serve_forever()
