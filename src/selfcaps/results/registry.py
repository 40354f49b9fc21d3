"""The results registry: one row per published number, from which the docs' tables are made.

Every number that README.md and the manual publish as a result lives in
``results/registry.yaml``, one row per measurement, with what produced it: the method, the
preset and the ``key=value`` overrides of each arm, the hash of the configuration they
resolved to, the dataset and budget, the seeds and each seed's value, the exact command,
commit, date, cores and threads. Tables in the docs are generated from it
(``selfcaps report``), never typed by hand, and a verdict is never stored: it is computed
from the per-seed values by :func:`selfcaps.results.paired.paired_comparison`.

A row's ``config_hash`` pins the presets behind it: when a preset (or the base
configuration) changes so that an arm no longer resolves to the stored hash, the row is
*stale*. ``selfcaps report --check`` (and the test suite) fail on a stale row that is not
marked ``stale: <reason>``; a marked row is shown with its reason on every page.

Row fields (YAML mapping; ``kind`` decides which arms it has):

==================  =====================================================================
``id``              unique name, e.g. ``sparsecaps.claim.long``
``kind``            ``paired`` (treatment vs control, same seeds) or ``single`` (one arm)
``tables``          names of the generated tables that show the row (``claims``, ``bench``,
                    a method's name, ...)
``method``          the method (``coca``, ...)
``what``            what is measured, in a few words (a claim's statement for claims)
``comparison``      paired rows: ``"treatment vs control"`` as shown
``rung``            the budget's name (``short``, ``long``, ``1,687 steps``, ...)
``budget``          the budget in words (epochs or steps, images, or minutes if timed)
``dataset``         the dataset the numbers are measured on
``metric``          the ``metrics.json`` key (or keys) read
``higher_is_better`` paired rows: the direction the claim predicts (default true)
``treatment``       paired rows: ``{label, preset, overrides, values}``
``control``         paired rows: the same
``arm``             single rows: the same
``seeds``           the seeds, in the order of every arm's ``values``
``paper``           the paper's number(s) in words, or null
``config_hash``     :func:`row_config_hash` of the arms when the row was measured
``command``         the exact command (``S`` stands for each seed)
``commit``          the commit that ran it
``date``            ISO date
``cores``           CPU cores of the machine
``threads``         torch threads per run
``cpu``             optional: the CPU's model and instruction set, as a run's ``metrics.json``
                    records them (``cpu``, ``cpu_capability``); the same command gives other
                    per-seed numbers on a CPU with other kernels (docs/results.md)
``gpu``             optional: the GPU the runs trained on, as ``metrics.json`` names it
                    (``gpu``), with their TF32 flags where they were not PyTorch's
                    defaults (``tf32_conv``, ``tf32_matmul``); absent for a CPU row
``stale``           null, or why the row no longer matches its preset (shown with it)
``note``            optional short note shown with the row
``units``           optional: how many independent units the seeds are for the claim
                    (default: one per seed); three finetunings of one pretraining are one
                    unit of a claim about pretraining. Fewer than 3 units give no verdict
``no_difference``   optional, paired rows: true when the claim is that the arms do not differ
``equivalence_margin`` optional, paired rows: the margin (metric units) within which a
                    no-difference claim counts as *equivalent* (TOST); implies
                    ``no_difference``. A no-difference claim without one gets no verdict
``faithful``        optional: the row runs the paper's own settings and reading (at a reduced
                    budget); its value names the reading (``paper``, or which of two readings
                    of a paper that allows two)
``paper_dataset``   optional: true when the row runs on the paper's own dataset
``departure``       optional: the row's named departures from the paper, in words
``budget_images``   training images processed by the treatment arm (steps x batch over every
                    phase; the smallest seed's for a timed budget); required with
                    ``faithful``, ``paper_dataset`` or ``departure``: the README's claims
                    table picks rows by it
==================  =====================================================================
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from selfcaps.config.loading import ConfigError, load_config, parse_overrides, read_yaml
from selfcaps.results.paired import PairedResult, paired_comparison

__all__ = [
    "DEFAULT_REGISTRY",
    "HASH_EXCLUDED",
    "HASH_FIXED",
    "HASH_OMITTED_AT",
    "ROLE_FIELDS",
    "Arm",
    "RegistryError",
    "Row",
    "arm_config_hash",
    "check_hashes",
    "config_hash",
    "load_registry",
    "row_config_hash",
]

#: Where the registry lives, relative to the repository root.
DEFAULT_REGISTRY = Path("results") / "registry.yaml"

#: Keys that do not change what a run computes and so stay out of the hash: the seed (a row
#: lists its seeds), where the data live, and how often the run reports and saves (progress
#: bar, log interval, periodic checkpoints, figures: output only, no arithmetic or random draws).
HASH_EXCLUDED = (
    "seed",
    "data.root",
    "trainer.progress_bar",
    "trainer.log_every_n_steps",
    "trainer.checkpoint_every_n_minutes",
    "trainer.checkpoint_every_n_steps",
    "eval.figures",
)
#: Keys added after rows were measured, left out of the hash at the value that reproduces the
#: code before them (so that adding them does not make every row stale); any other value counts.
HASH_OMITTED_AT = {
    "trainer.routing_precision": "float32",
    "cd.orthogonal_encoder": False,
    "trainer.compile_mode": None,
    "trainer.vote_precision": "float32",
    "trainer.tf32": None,
    "trainer.cudnn_benchmark": None,
}
#: Keys hashed at one value whatever they are set to: they change neither the arithmetic nor
#: the random draws, and rows were measured with this value. Loader workers: every item is
#: transformed under its own seeded generator, so any number of workers gives the same batches.
HASH_FIXED = {"data.num_workers": 0}

_REQUIRED = (
    "id", "kind", "tables", "method", "what", "rung", "budget", "dataset", "metric", "seeds",
    "config_hash", "command", "commit", "date", "cores", "threads",
)  # fmt: skip
_OPTIONAL = ("comparison", "higher_is_better", "treatment", "control", "arm", "paper", "stale",
             "note", "cpu", "gpu", "units", "no_difference", "equivalence_margin", "faithful",
             "paper_dataset", "departure", "budget_images")  # fmt: skip
#: Fields that put a row forward for the README's claims table (each needs ``budget_images``).
ROLE_FIELDS = ("faithful", "paper_dataset", "departure")


class RegistryError(ValueError):
    """A registry row that cannot be used; the message names the file, the row and the field."""


@dataclass(frozen=True)
class Arm:
    """One arm of a row: how its runs were configured and each seed's value.

    Attributes:
        label: Name shown in tables ("sparse", "untrained").
        preset: The method's preset.
        overrides: ``key=value`` overrides of this arm (flags written as their keys).
        values: One value per seed of the row, in the row's seed order.
    """

    label: str
    preset: str
    overrides: tuple[str, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class Row:
    """One published measurement (see the module docstring for the fields)."""

    id: str
    kind: str
    tables: tuple[str, ...]
    method: str
    what: str
    rung: str
    budget: str
    dataset: str
    metric: str
    seeds: tuple[int, ...]
    config_hash: str
    command: str
    commit: str
    date: str
    cores: int
    threads: int
    arms: tuple[Arm, ...]
    comparison: str | None = None
    higher_is_better: bool = True
    paper: str | None = None
    stale: str | None = None
    note: str | None = None
    cpu: str | None = None
    gpu: str | None = None
    units: int | None = None
    no_difference: bool = False
    equivalence_margin: float | None = None
    faithful: str | None = None
    paper_dataset: bool = False
    departure: str | None = None
    budget_images: int | None = None
    #: Arm hashes already resolved, shared by the rows of one :func:`load_registry` (many
    #: rows and tables repeat an arm; resolving a preset is the slow part of a report).
    hash_memo: dict[tuple[str, str, tuple[str, ...]], str] = field(
        default_factory=dict, compare=False, repr=False
    )

    @cached_property
    def paired(self) -> PairedResult | None:
        """The paired comparison of a ``paired`` row (None for ``single`` rows)."""
        if self.kind != "paired":
            return None
        treatment, control = self.arms
        return paired_comparison(
            treatment.values,
            control.values,
            self.higher_is_better,
            units=self.units,
            no_difference=self.no_difference,
            margin=self.equivalence_margin,
        )

    def current_hash(self) -> str:
        """:func:`row_config_hash` of the arms as their presets resolve today."""
        return row_config_hash(self.method, self.arms, self.hash_memo)


def config_hash(cfg: Any) -> str:
    """Short SHA-256 of a resolved configuration, without :data:`HASH_EXCLUDED`.

    A key of :data:`HASH_OMITTED_AT` is left out at its value there, hashed at any other; a
    key of :data:`HASH_FIXED` is hashed at its value there, whatever it is set to.

    Args:
        cfg: A configuration (``DictConfig`` or nested dict).

    Returns:
        The first 12 hex digits of the SHA-256 of its canonical JSON.

    Examples:
        >>> config_hash({"seed": 1, "a": {"b": 2}}) == config_hash({"a": {"b": 2}, "seed": 5})
        True
        >>> none, low = {"trainer": {}}, {"trainer": {"routing_precision": "autocast"}}
        >>> config_hash({"trainer": {"routing_precision": "float32"}}) == config_hash(none)
        True
        >>> config_hash(low) == config_hash(none)
        False
        >>> auto, zero = {"data": {"num_workers": None}}, {"data": {"num_workers": 0}}
        >>> config_hash(auto) == config_hash(zero)
        True
    """
    data = OmegaConf.to_container(cfg, resolve=True) if not isinstance(cfg, dict) else cfg
    data = json.loads(json.dumps(data))  # a deep copy with plain types
    for key in (*HASH_EXCLUDED, *HASH_OMITTED_AT):
        *parents, leaf = key.split(".")
        node = data
        for p in parents:
            node = node.get(p, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict) and (
            key not in HASH_OMITTED_AT or node.get(leaf) == HASH_OMITTED_AT[key]
        ):
            node.pop(leaf, None)
    for key, value in HASH_FIXED.items():
        *parents, leaf = key.split(".")
        node = data
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict) and leaf in node:
            node[leaf] = value
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def arm_config_hash(method: str, preset: str, overrides: Sequence[str]) -> str:
    """:func:`config_hash` of what ``method``'s ``preset`` with ``overrides`` resolves to today.

    Raises:
        ConfigError: Unknown method, preset or key, or a value of the wrong type.
    """
    return config_hash(load_config(method, preset, parse_overrides(list(overrides))))


def row_config_hash(
    method: str,
    arms: Sequence[Arm],
    memo: dict[tuple[str, str, tuple[str, ...]], str] | None = None,
) -> str:
    """One hash for a row: its arm's hash, or a hash of its arms' hashes when they differ.

    Args:
        method: The row's method.
        arms: Its arms.
        memo: Arm hashes resolved before, keyed by ``(method, preset, overrides)``; filled in.
    """
    memo = {} if memo is None else memo
    hashes = []
    for a in arms:
        key = (method, a.preset, a.overrides)
        if key not in memo:
            memo[key] = arm_config_hash(method, a.preset, a.overrides)
        hashes.append(memo[key])
    if len(set(hashes)) == 1:
        return hashes[0]
    return hashlib.sha256(",".join(hashes).encode()).hexdigest()[:12]


def _arm(where: str, raw: Any, n_seeds: int) -> Arm:
    if not isinstance(raw, dict):
        raise RegistryError(f"{where}: expected a mapping with label, preset, values; got {raw!r}")
    missing = [k for k in ("label", "preset", "values") if k not in raw]
    if missing:
        raise RegistryError(f"{where}: missing {', '.join(missing)}")
    unknown = set(raw) - {"label", "preset", "overrides", "values"}
    if unknown:
        raise RegistryError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    values = raw["values"]
    if not isinstance(values, list) or len(values) != n_seeds:
        raise RegistryError(
            f"{where}.values: expected one number per seed ({n_seeds}), got {values!r}"
        )
    try:
        vals = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        raise RegistryError(f"{where}.values: not all numbers: {values!r}") from None
    if not all(math.isfinite(v) for v in vals):
        raise RegistryError(f"{where}.values: non-finite value in {values!r}")
    overrides = raw.get("overrides") or []
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise RegistryError(f"{where}.overrides: expected a list of key=value strings")
    return Arm(str(raw["label"]), str(raw["preset"]), tuple(overrides), vals)


#: Fields shown in a markdown table cell, where a '|' would split the cell.
_CELLS = ("method", "what", "rung", "budget", "dataset", "metric", "comparison", "note", "stale",
          "faithful", "departure")  # fmt: skip


def _role_fields(where: str, raw: dict[str, Any], n_seeds: int) -> dict[str, Any]:
    """The optional statistical and claims-table fields of a row, checked."""
    units = raw.get("units")
    if units is not None and (
        isinstance(units, bool) or not isinstance(units, int) or not 1 <= units <= n_seeds
    ):
        raise RegistryError(f"{where}.units: expected an integer in 1..{n_seeds}, got {units!r}")
    margin = raw.get("equivalence_margin")
    if margin is not None:
        if isinstance(margin, bool) or not isinstance(margin, int | float) or not margin > 0:
            raise RegistryError(
                f"{where}.equivalence_margin: expected a positive number, got {margin!r}"
            )
        if raw["kind"] != "paired":
            raise RegistryError(f"{where}.equivalence_margin: only a paired row has a margin")
    for key in ("no_difference", "paper_dataset"):
        if not isinstance(raw.get(key, False), bool):
            raise RegistryError(f"{where}.{key}: expected true or false, got {raw[key]!r}")
    for key in ("faithful", "departure"):
        if key in raw and (not isinstance(raw[key], str) or not raw[key].strip()):
            raise RegistryError(f"{where}.{key}: expected a non-empty text, got {raw[key]!r}")
    images = raw.get("budget_images")
    has_role = any(raw.get(k) for k in ROLE_FIELDS)
    if images is not None and (isinstance(images, bool) or not isinstance(images, int)
                               or images <= 0):  # fmt: skip
        raise RegistryError(f"{where}.budget_images: expected a positive integer, got {images!r}")
    if has_role and images is None:
        raise RegistryError(
            f"{where}: a row with faithful, paper_dataset or departure needs budget_images "
            "(the claims table ranks budgets by it)"
        )
    return {
        "units": units,
        "no_difference": bool(raw.get("no_difference", False)) or margin is not None,
        "equivalence_margin": None if margin is None else float(margin),
        "faithful": raw.get("faithful"),
        "paper_dataset": bool(raw.get("paper_dataset", False)),
        "departure": raw.get("departure"),
        "budget_images": images,
    }


def _row(where: str, raw: Any, memo: dict[Any, str]) -> Row:
    if not isinstance(raw, dict):
        raise RegistryError(f"{where}: expected a mapping, got {type(raw).__name__}")
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        raise RegistryError(f"{where}: missing field(s) {', '.join(missing)}")
    unknown = set(raw) - set(_REQUIRED) - set(_OPTIONAL)
    if unknown:
        raise RegistryError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    where = f"{where} ({raw['id']})"
    seeds = raw["seeds"]
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise RegistryError(f"{where}.seeds: expected a non-empty list of integers, got {seeds!r}")
    kind = raw["kind"]
    if kind == "paired":
        if "arm" in raw or "treatment" not in raw or "control" not in raw:
            raise RegistryError(f"{where}: a paired row has treatment and control, no arm")
        arms = (
            _arm(f"{where}.treatment", raw["treatment"], len(seeds)),
            _arm(f"{where}.control", raw["control"], len(seeds)),
        )
        if not raw.get("comparison"):
            raise RegistryError(f"{where}: a paired row needs comparison (treatment vs control)")
    elif kind == "single":
        if "treatment" in raw or "control" in raw or "arm" not in raw:
            raise RegistryError(f"{where}: a single row has arm, no treatment or control")
        arms = (_arm(f"{where}.arm", raw["arm"], len(seeds)),)
    else:
        raise RegistryError(f"{where}.kind: expected paired or single, got {kind!r}")
    cells = {k: raw.get(k) for k in _CELLS} | {f"{a.label!r} label": a.label for a in arms}
    piped = sorted(k for k, v in cells.items() if v is not None and "|" in str(v))
    if piped:  # a '|' would split a markdown table cell
        raise RegistryError(f"{where}: '|' in {', '.join(piped)} (a table cell); write it in words")
    tables = raw["tables"]
    if not isinstance(tables, list) or not tables:
        raise RegistryError(f"{where}.tables: expected a non-empty list of table names")
    text = ("id", "method", "what", "rung", "budget", "dataset", "metric", "config_hash",
            "command", "commit", "date")  # fmt: skip
    return Row(
        **{k: str(raw[k]) for k in text},
        kind=kind,
        tables=tuple(str(t) for t in tables),
        seeds=tuple(seeds),
        cores=int(raw["cores"]),
        threads=int(raw["threads"]),
        arms=arms,
        comparison=raw.get("comparison"),
        higher_is_better=bool(raw.get("higher_is_better", True)),
        paper=None if raw.get("paper") is None else str(raw["paper"]),
        stale=raw.get("stale"),
        note=raw.get("note"),
        cpu=None if raw.get("cpu") is None else str(raw["cpu"]),
        gpu=None if raw.get("gpu") is None else str(raw["gpu"]),
        **_role_fields(where, raw, len(seeds)),
        hash_memo=memo,
    )


def load_registry(path: Path | str = DEFAULT_REGISTRY) -> list[Row]:
    """Read and validate the registry.

    Args:
        path: ``results/registry.yaml`` (a YAML list of rows).

    Returns:
        The rows, in file order.

    Raises:
        RegistryError: The file is missing or not a list, a row lacks a field or has an
            unknown one, a value list does not match the seeds, ids repeat.
    """
    path = Path(path)
    if not path.is_file():
        raise RegistryError(f"{path}: no results registry here (run from the repository root)")
    raw = read_yaml(path, list, RegistryError)
    memo: dict[Any, str] = {}
    rows = [_row(f"{path}: row {i}", r, memo) for i, r in enumerate(raw)]
    seen: set[str] = set()
    for r in rows:
        if r.id in seen:
            raise RegistryError(f"{path}: id {r.id!r} appears twice")
        seen.add(r.id)
    return rows


def check_hashes(rows: Sequence[Row]) -> list[str]:
    """Rows whose presets no longer resolve to their ``config_hash`` and are not marked stale.

    Returns:
        One message per such row (empty when every row is current or marked).
    """
    problems = []
    for r in rows:
        try:
            now = r.current_hash()
        except ConfigError as e:
            now = f"(does not resolve: {e})"
        if now != r.config_hash and not r.stale:
            problems.append(
                f"{r.id}: its arms resolve to config hash {now} today, the registry says "
                f"{r.config_hash}; a preset behind a published number changed. Re-measure "
                "the row, or mark it `stale: <why>` (every page showing it will say so)."
            )
    return problems
