"""What a paper's central claim is, as a paired comparison ``selfcaps bench --suite claims`` runs.

Each method's record carries one :class:`Claim` (``MethodRecord.claim``): the statement, where
the paper makes it, and one or more :class:`Comparison` of a treatment :class:`Arm` with a
control arm. An arm is a ``selfcaps run`` configuration (extra arguments) and the
``metrics.json`` key read from it; arms with the same arguments share their runs (CoCa's
trained, untrained and pixel numbers all come from one run per seed).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Arm", "Claim", "Comparison", "Rung"]


@dataclass(frozen=True)
class Arm:
    """One side of a comparison.

    Attributes:
        label: Short name shown in the report ("sparse", "untrained").
        metric: The ``metrics.json`` key holding this arm's number.
        args: Extra ``selfcaps run`` arguments (flags or ``key=value``) of this arm's runs.
    """

    label: str
    metric: str
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Comparison:
    """Treatment against control on the same seeds.

    Attributes:
        treatment: The arm the claim says is better.
        control: The arm it is compared with.
        paper: The paper's own numbers for (treatment, control); None where it gives none.
        higher_is_better: Whether the claim predicts treatment > control for ``metric``.
    """

    treatment: Arm
    control: Arm
    paper: tuple[float | None, float | None] = (None, None)
    higher_is_better: bool = True

    @property
    def name(self) -> str:
        """``"treatment vs control"``."""
        return f"{self.treatment.label} vs {self.control.label}"


@dataclass(frozen=True)
class Rung:
    """A longer budget at which a claim is tested (``selfcaps bench --suite claims --tier long``).

    Attributes:
        dataset: The dataset of this rung's runs.
        preset: The method's preset of this rung's runs.
        args: Further ``selfcaps run`` arguments shared by every run of the rung.
        budget: The budget in words, as the method's page names it.
        metric_suffix: Appended to every arm's ``metrics.json`` key at this rung (e.g.
            ``_lf10`` where the rung's preset finetunes on 10% of the labels).
    """

    dataset: str
    preset: str
    args: tuple[str, ...] = ()
    budget: str = ""
    metric_suffix: str = ""


@dataclass(frozen=True)
class Claim:
    """A paper's central claim.

    Attributes:
        statement: The claim in one line.
        source: Where the paper makes it and where its numbers come from.
        dataset: The dataset the CPU suite tests it on (``--paper`` uses ``paper_dataset``).
        paper_dataset: The dataset of the paper's numbers.
        comparisons: The paired comparisons the claim rests on.
        args: ``selfcaps run`` arguments shared by every run of the claim: its budget (e.g.
            ``("--epochs", "1")``), so that the default suite fits about two hours on 2 CPU
            cores. Dropped when ``selfcaps bench --budget MIN`` gives a budget in minutes.
        paper_args: The same for ``--paper`` (paper presets, meant for GPUs).
        long: The longer rung of ``--tier long``, where the method's page says the claim can
            show at a CPU budget (None: the claim has only the short tier).
    """

    statement: str
    source: str
    dataset: str
    paper_dataset: str
    comparisons: tuple[Comparison, ...]
    args: tuple[str, ...] = ()
    paper_args: tuple[str, ...] = ()
    long: Rung | None = None

    def arms(self) -> list[Arm]:
        """Every arm, each distinct ``args`` once (the runs the claim needs per seed)."""
        seen: dict[tuple[str, ...], Arm] = {}
        for c in self.comparisons:
            for arm in (c.treatment, c.control):
                seen.setdefault(arm.args, arm)
        return list(seen.values())
