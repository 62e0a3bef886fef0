"""OUT/train.png: loss, the eval's exact accept length and teacher-forced accuracy against the step."""

from __future__ import annotations

from pathlib import Path


def plot_training(log: list[dict], dest: Path) -> None:
    from draftlab import figures

    steps = [e["step"] for e in log]
    fig, (ax_loss, ax_eval, ax_acc) = figures.plt.subplots(1, 3, figsize=(13, 3.6))
    ax_loss.plot(steps, [e["loss"] for e in log])
    ax_loss.set(title="TTT loss (0.8^i weighted)", xlabel="step")
    evals = [e for e in log if "eval" in e]
    if evals:
        ax_eval.plot([e["step"] for e in evals], [e["eval"]["accept_length"] for e in evals], marker="o")
    ax_eval.set(title="exact accept length (probe, held out)", xlabel="step")
    for i in range(len(log[0]["accuracy_by_step"])):
        ax_acc.plot(steps, [e["accuracy_by_step"][i] for e in log], label=f"step {i}")
    ax_acc.set(title="teacher-forced top-1 accuracy", xlabel="step", ylim=(0, 1))
    figures.legend(ax_acc, fontsize="small")  # the last panel: its legend sits beside the figure
    figures.save_png(fig, dest, dpi=90)
