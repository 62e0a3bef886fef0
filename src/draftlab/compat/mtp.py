"""``check mtp --target T``: whether one engine release serves the target's own MTP layers, and with which flags
(the rules: :mod:`draftlab.engines.mtp`)."""

from __future__ import annotations

import json
from pathlib import Path

from draftlab.checkpoint import is_drafter, open_checkpoint
from draftlab.compat.findings import CheckResult, Finding, sort_findings
from draftlab.compat.pair import Pair
from draftlab.engines.mtp import MTP, MtpSupport, ShippedMtp, mtp_support, shipped_mtp
from draftlab.engines.mtp_head import MtpServing
from draftlab.engines.releases import release
from draftlab.errors import DraftlabError


def check_mtp(target: str | Path, engine: str = "sglang", engine_version: str | None = None) -> CheckResult:
    """Every finding for serving ``target``'s own MTP layers as its drafter in ``engine`` at ``engine_version``
    (default: the newest release draftlab knows)."""
    version = release(engine, engine_version).version  # refuse an unknown engine or release before touching files
    ckpt = open_checkpoint(target)
    if is_drafter(ckpt):
        raise DraftlabError("is an EAGLE-3 drafter; check mtp --target takes the target model, whose own MTP "
                            "layers draft", path=target)
    shipped = shipped_mtp(ckpt.config, {name: info.numel for name, info in ckpt.tensors.items()})
    support = mtp_support(engine, version, ckpt.config, shipped)
    findings = sort_findings(mtp_findings(support, shipped, str(target)))
    return CheckResult(ok=not any(f.severity == "error" for f in findings), engine=engine, engine_version=version,
                       drafter=Path(MTP), target=Path(target), aux_layers=[], aux_source="none (the MTP head reads "
                       "the target's final hidden state)", findings=findings,
                       deployment=MtpServing(engine, engine_version).describe())


def mtp_findings(support: MtpSupport, shipped: ShippedMtp | None, target: str) -> list[Finding]:
    """The findings for one release and one target's MTP layers."""
    if support.family is None:
        return [Finding("mtp-unserved", "error", "architectures", f"{support.why_not}: it serves MTP for "
                        "DeepSeek-V3/V3.2, GLM-4.5+/4.7-Flash/5, MiMo, Qwen3-Next and Qwen3.5/3.6 targets",
                        "draft with an EAGLE-3 drafter (check DRAFTER --target T) or a model-free method")]
    if shipped is None:
        return [Finding("mtp-missing", "error", support.family.count_key, f"the checkpoint ships no MTP layer "
                        f"(no model.layers.{{L}}.eh_proj, mtp.fc or model.mtp_layers tensors): {support.why_not}",
                        "use the release of the checkpoint that keeps its MTP weights, or an EAGLE-3 drafter")]
    if not support.served:
        return [Finding("mtp-unserved", "error", support.family.count_key, f"{support.name}: {support.why_not}",
                        "set the count the checkpoint stores, or draft with an EAGLE-3 drafter")]
    findings = [Finding("mtp-served", "info", shipped.prefix, _served(support, shipped),
                        f"draftlab launch {support.engine} --target {target} --drafter mtp "
                        f"--engine-version {support.version} (--dry-run shows the command)")]
    if shipped.stored > 1:
        findings.append(Finding("mtp-layers", "info", shipped.prefix, (
            f"the checkpoint ships {shipped.stored} MTP layers; {support.name} drafts every step with the first "
            + ("only (SGLang loads exactly one)" if support.engine == "sglang" else
               f"and takes num_speculative_tokens above {support.n_predict} only as a multiple of it")),
            "nothing to change: draftlab computes the head as the release serves it (generate --drafter mtp)"))
    return findings


def _served(support: MtpSupport, shipped: ShippedMtp) -> str:
    """The served finding's message: the class, where it comes from, and the flags."""
    if support.engine == "sglang":
        flags = "--speculative-algorithm NEXTN (EAGLE's alias) with --speculative-num-steps/-eagle-topk/-num-draft-tokens"
        shape = "chains and trees (--speculative-eagle-topk > 1)"
    else:
        flags = f"--speculative-config {json.dumps({'method': MTP, 'num_speculative_tokens': 'K'})}"
        shape = "a chain only (no token tree for MTP)"
    eagle3 = ("" if support.eagle3_unserved is None else
              f"; it serves no EAGLE-3 drafter on this target ({support.eagle3_unserved}): MTP is its speculative path")
    return (f"{support.name} serves the target's MTP layer {shipped.prefix}* as {support.draft_class} "
            f"({support.source}), each draft step running it again: {flags}; {shape}{eagle3}")


def mtp_alternative(pair: Pair) -> list[Finding]:
    """Beside a drafter: the target's own MTP layers, where the release serves them (the other candidate)."""
    ckpt = pair.target_ckpt
    shipped = shipped_mtp(ckpt.config, {name: info.numel for name, info in ckpt.tensors.items()})
    support = mtp_support(pair.engine, pair.version, ckpt.config, shipped)
    if shipped is None or not support.served:
        return []
    return [Finding("mtp-available", "info", shipped.prefix, (
        f"the target ships {shipped.stored} MTP layer(s) that {support.name} serves as {support.draft_class} with no "
        "drafter at all"), "compare both offline: draftlab probe --drafter mtp beside this drafter (or draftlab "
        "assess); check mtp --target T for the flags")]


RULES = (mtp_alternative,)
