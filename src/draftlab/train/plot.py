"""OUT/train.png: loss, teacher-forced accuracy and the eval's exact accept length against the step
(matplotlib is imported here only)."""

from __future__ import annotations

from pathlib import Path

from draftlab.fsutil import atomic_path


def plot_training(log: list[dict], dest: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [e["step"] for e in log]
    fig, (ax_loss, ax_acc, ax_eval) = plt.subplots(1, 3, figsize=(13, 3.6))
    ax_loss.plot(steps, [e["loss"] for e in log])
    ax_loss.set(title="TTT loss (0.8^i weighted)", xlabel="step")
    for i in range(len(log[0]["accuracy_by_step"])):
        ax_acc.plot(steps, [e["accuracy_by_step"][i] for e in log], label=f"step {i}")
    ax_acc.set(title="teacher-forced top-1 accuracy", xlabel="step", ylim=(0, 1))
    ax_acc.legend(fontsize="small")
    evals = [e for e in log if "eval" in e]
    if evals:
        ax_eval.plot([e["step"] for e in evals], [e["eval"]["accept_length"] for e in evals], marker="o")
    ax_eval.set(title="exact accept length (probe, held out)", xlabel="step")
    fig.tight_layout()
    with atomic_path(dest) as tmp:
        fig.savefig(tmp, format="png", dpi=90)
    plt.close(fig)
