"""Each kind of drafter folder draftlab writes x each peer: loads, keys, max logit difference.

Builds the same toy-sized folders as ``test_peers.py`` beside it (peer_kinds.py: a Llama target with
hidden 32 and 97 tokens, a one-layer EAGLE-3 drafter with non-unit norms, float32), loads each into
SpecForge's ``LlamaForCausalLMEagle3`` and speculators' ``Eagle3DraftModel`` the way the tests do, and
prints a markdown table for benchmarks/RESULTS.md. A script, not a test (pytest collects test_*.py
only). Needs the peers (README, "Run the whole test suite"). Run from the repository root:

    PYTHONPATH=src python tests/peers/peer_table.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from peer_kinds import (
    KINDS,
    PEER_VERSIONS,
    SPECULATORS,
    draftlab_logits,
    inputs,
    make_target,
    peer_import_error,
    peer_load,
)


def row(peer: str, kind, folder: Path, root: Path, target: Path) -> list[str]:
    """One table row: loads (how), missing / unexpected keys, max logit difference, argmax agreement."""
    if peer == "specforge" and kind.layout == SPECULATORS:
        return ["n/a: SpecForge reads flat configs only", "", "", ""]
    ids, hidden = inputs()
    try:
        loaded, how = peer_load(peer, folder, kind.layout, root, target, ids, hidden)
    except Exception as exc:  # a failure is a result here, reported in the table
        return [f"fails: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}", "", "", ""]
    ours = draftlab_logits(folder, ids, hidden)
    agree = int((loaded.logits.argmax(-1) == ours.argmax(-1)).sum())
    keys = "none / none" if not (loaded.missing or loaded.unexpected) else f"{loaded.missing} / {loaded.unexpected}"
    return [f"yes ({how})", keys, f"{(loaded.logits - ours).abs().max().item():.1e} (logits up to "
            f"{ours.abs().max():.1f})", f"{agree}/{ids.numel()}"]


def main() -> int:
    for peer in PEER_VERSIONS:
        why = peer_import_error(peer)
        if why is not None:
            print(f"{peer} {PEER_VERSIONS[peer]} cannot be imported: {why}", file=sys.stderr)
            return 2
    names = {"specforge": "SpecForge", "speculators": "speculators"}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        target = make_target(root)
        print("| output kind | peer | loads | missing / unexpected keys | max abs logit diff vs draftlab "
              "| argmax agree |")
        print("|---|---|---|---|---|---|")
        for kind in KINDS:
            folder = kind.build(root, target)
            for peer, version in PEER_VERSIONS.items():
                print("| " + " | ".join([kind.name, f"{names[peer]} {version}", *row(peer, kind, folder, root, target)])
                      + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
