"""The figure of the distant-context tables (``smollm2_distant.py``, ``smollm2_breakdown.py``,
``gemma3_distant.py``): each spec's paired comparison against its reference at the same length, a
panel per metric, a row per kind of spec, a colour per length, 95% intervals."""

from __future__ import annotations

from pathlib import Path

from attntemp.evaluate.tasks import get_task

BASE = "no RoPE change, m = 1"  # every table's reference row


def yarn_base(results: dict[str, dict[str, dict]]) -> str | None:
    """The name of this length's YaRN at m = 1 row: what a temperature on YaRN is weighed against."""
    return next((n for n in results if n.startswith("YaRN") and n.endswith(", m = 1")), None)


PANELS = (  # (task, metric, x label): each spec against its row's reference at the same length, paired
    ("key_tokens", "tail_ppl", "tail ppl / reference's"),
    ("key_tokens", "key_ppl", "key-token ppl / reference's"),
    ("needles", "acc", "needles accuracy - reference's"),
    ("needles", "logp", "answer log-prob - reference's"),
)


def kind_of(name: str) -> str:
    """A spec's row in the figure, the same at every length (the table's names carry s and m),
    with what it is weighed against there: a temperature on YaRN against YaRN at m = 1."""
    if "tuned at" in name:
        return "YaRN, m tuned on " + ("key tokens" if "key tokens" in name else "tail ppl") + "\n(vs YaRN, m = 1)"
    if "softer" in name:
        return "no RoPE change, softer m\n(vs m = 1)"
    return "YaRN, YaRN's m\n(vs YaRN, m = 1)" if "YaRN's m" in name else "YaRN, m = 1\n(vs m = 1, no RoPE change)"


def kind_by_name(name: str) -> str:
    """A figure row per spec for tables of many specs without a RoPE change: YaRN rows as
    :func:`kind_of` draws them, every other spec a row of its own, against m = 1."""
    return kind_of(name) if name.startswith("YaRN") else name.replace(" (", "\n(") + " (vs m = 1)"


def _panel(ax, task_name: str, metric: str, kinds: list[str], all_results: dict, kind=kind_of) -> int:
    """One metric's paired comparisons for the specs of ``kinds``, a colour per length; returns
    how many it drew (none: the panel says "not run yet" instead of an empty 0-to-1 axis)."""
    from attntemp.analysis import style

    task, drawn = get_task(task_name), 0
    for j, (_length, results) in enumerate(sorted(all_results.items())):
        yarn1 = yarn_base(results)
        for name, by_task in results.items():
            if name == BASE or kind(name) not in kinds or task_name not in by_task:
                continue
            ref = yarn1 if "(vs YaRN, m = 1)" in kind(name) else BASE
            base = results[ref].get(task_name) if ref else None
            ci = None if base is None else task.paired(by_task[task_name], base, metric)
            if ci is not None:
                y = kinds.index(kind(name)) + (j - 1) * 0.22
                err = [[ci.value - ci.low], [ci.high - ci.value]]
                ax.errorbar(ci.value, y, xerr=err, fmt="o", ms=4, capsize=2, color=style.OTHER_COLORS[j])
                drawn += 1
    if not drawn:
        ax.text(0.5, 0.5, "not run yet", transform=ax.transAxes, ha="center", va="center", fontsize=8, color="0.4")
        ax.set_xticks([])
        return 0
    ax.axvline(task.metric(metric).null, **style.NULL)
    return drawn


def write_figure(all_results: dict[int, dict[str, dict[str, dict]]], settings: dict, path: Path, kind=kind_of) -> None:
    """The table's paired comparisons as one figure: a panel per metric, a row per ``kind`` of spec,
    a colour per length, each point with its 95% interval (a missing one: not run yet). Each group
    of rows on its own scale, so none hides another: a temperature without a RoPE change against
    m = 1 (a few percent), YaRN against no change (up to 90%), a temperature on YaRN against YaRN at
    m = 1 (a few percent)."""
    import matplotlib.pyplot as plt

    from attntemp.analysis import style

    kinds = list(dict.fromkeys(kind(n) for res in all_results.values() for n in res if n != BASE))
    on_yarn = [k for k in kinds if "(vs YaRN, m = 1)" in k]
    yarn = [k for k in kinds if k.startswith("YaRN") and k not in on_yarn]
    groups = [[k for k in kinds if k not in on_yarn and k not in yarn], yarn, on_yarn]
    groups = [g for g in groups if g]
    fig, axes = plt.subplots(
        len(groups),
        len(PANELS),
        figsize=(14, sum(0.5 * len(g) + 1.2 for g in groups) + 0.6),
        squeeze=False,
        height_ratios=[len(g) + 1 for g in groups],
        layout="constrained",
    )
    for row, group in zip(axes, groups, strict=True):
        for ax, (task_name, metric, label) in zip(row, PANELS, strict=True):
            _panel(ax, task_name, metric, group, all_results, kind)
            ax.set_xlabel(label, fontsize=8)
            ax.set_yticks(range(len(group)), group if ax is row[0] else [""] * len(group), fontsize=8)
            ax.set_ylim(len(group) - 0.5, -0.5)
    for j, length in enumerate(sorted(all_results)):
        axes[0][0].plot([], [], "o", color=style.OTHER_COLORS[j], label=f"{length} tokens")
    fig.legend(
        *axes[0][0].get_legend_handles_labels(),
        loc="outside lower center",
        ncol=len(all_results),
        fontsize=8,
        frameon=False,
    )
    fig.suptitle(
        f"{settings['model']}: each spec against its reference (in brackets) at the same length, paired, "
        f"95% intervals over {settings['docs']} documents (trained length {settings['trained']})",
        fontsize=9,
    )
    style.save(fig, path)
