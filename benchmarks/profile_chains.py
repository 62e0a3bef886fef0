"""How well one chain profile predicts shorter chains: 1 + sum of the first k marginals against a probe of k drafts.

CPU, the trained toy pair (built once and cached by ``draftlab.toy``):
    python benchmarks/profile_chains.py --steps 6 --max-new-tokens 96

Probes the chain of ``--steps`` drafts, builds its acceptance profile (``probe --profile-out``), derives every
shorter chain's accept length the way ``plan --profile`` does, and probes each shorter chain directly (exact
greedy accept lengths). The derivation is exact per cycle root; a decode visits different roots for different
k, which is the whole difference. Prints one JSON line per k and a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from draftlab.acceptance.profile import accept_length_for
from draftlab.probe.probe import probe
from draftlab.probe.to_profile import profile_from_probe
from draftlab.toy import cached_toy_pair

TEXTS = ["def __init__(self, ", "import os\nimport sys\n\n", "    for i in range(len(", "class Foo(object):\n    ",
         "return self._", "if __name__ == '__main__':\n    ", "    def forward(self, x):\n", "from typing import "]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    args = ap.parse_args()
    torch.set_num_threads(1)
    pair = cached_toy_pair()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        prompts = Path(tmp) / "prompts.jsonl"
        prompts.write_text("".join(json.dumps({"input_ids": list(t.encode())}) + "\n" for t in TEXTS))
        run = lambda k: probe(pair.target_dir, pair.drafter_dir, prompts, steps=k, topk=1,  # noqa: E731
                              num_draft_tokens=k + 1, max_new_tokens=args.max_new_tokens)
        profile = profile_from_probe(run(args.steps), prompts=prompts)
        for k in range(1, args.steps + 1):
            derived, how = accept_length_for(profile, k, 1, k + 1)
            probed = run(k).mean_accept_length
            row = {"chain": f"{k}/1/{k + 1}", "derived": round(derived, 4), "probed": round(probed, 4),
                   "error": round(derived / probed - 1, 4), "how": how}
            print(json.dumps(row), flush=True)
            rows.append(row)
    print("\n| chain | from the profile | probed | error |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['chain']} | {r['derived']:.3f} | {r['probed']:.3f} | {r['error']:+.1%} |")


if __name__ == "__main__":
    main()
