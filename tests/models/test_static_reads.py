"""The batch-1 static caches (generate's target and drafter) read the slots up to the step's last one
rounded up to READ_BUCKET (512), not their whole capacity: over a run that crosses read buckets, speculative
decoding on them gives the dynamic runtime's tokens and accept lengths (toy pair, float32)."""

from __future__ import annotations

import json

from draftlab.decode.generate import generate
from draftlab.models import target as target_module
from draftlab.models.static_kv import READ_BUCKET, StaticKV

PROMPT = ('"""Utilities for reading files."""\n\nimport os\nimport sys\n\n\nclass Reader:\n    def __init__(self, '
          'path, mode="r"):\n        self.path = path\n        self.mode = mode\n        self._file = None\n\n'
          '    def open(self):\n        self._file = open(self.path, self.mode)\n        return self\n\n    def ')
NEW = 320


def test_static_reads_grow_by_bucket_and_keep_the_dynamic_tokens(toy_pair, tmp_path, monkeypatch):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"input_ids": list(PROMPT.encode())}) + "\n")

    def run():
        return generate(toy_pair.target_dir, toy_pair.drafter_dir, prompts, steps=3, topk=1, num_draft_tokens=4,
                        max_new_tokens=NEW, ignore_eos=True)

    dynamic = run()
    widths: dict[StaticKV, set[int]] = {}  # each static cache -> the read widths its steps used
    begin = StaticKV.begin

    def spy(self, slots, positions, read):
        widths.setdefault(self, set()).add(read.numel())
        begin(self, slots, positions, read)

    monkeypatch.setattr(StaticKV, "begin", spy)
    monkeypatch.setattr(target_module, "STATIC_BY_DEFAULT", ("cuda", "cpu"))
    static = run()
    assert static.config["cache"] == "static"
    assert [r.output_ids for r in static.results] == [r.output_ids for r in dynamic.results]
    assert [r.accept_lengths for r in static.results] == [r.accept_lengths for r in dynamic.results]
    assert dynamic.mean_accept_length > 1.2 and max(dynamic.results[0].accept_lengths) == 4  # drafts accepted
    assert len(widths) == 2  # the target's cache and the drafter's
    for kv, used in widths.items():
        assert len(used) >= 2 and min(used) < kv.num_slots  # the early steps read less than the whole cache
        assert all(w % READ_BUCKET == 0 or w == kv.num_slots for w in used)
