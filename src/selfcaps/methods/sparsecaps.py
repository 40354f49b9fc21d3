r"""How SparseCaps learns: reconstruction through a routing-ranked sparse mask, with boosting.

Training: MNIST digits placed in a 40x40 canvas with random integer shifts of
up to +/-6 pixels (the reference code's ``--shift=6 --pad=6``; the paper, section
3.2: "only translations are varied at training time") go through the capsule
autoencoder of :mod:`selfcaps.models.sparsecaps`; the loss is the sum of squared
pixel errors per image, averaged over the batch; batch 128, 30,000 steps (paper
section 3). Adam, lr 1e-3 decayed by 0.96 every 2,000 steps (the reference
code's; the paper gives no schedule): with ``optim.scheduler=step`` and
``optim.staircase=false`` smoothly, :math:`10^{-3} \cdot 0.96^{t / 2000}`
floored at ``optim.min_lr`` 1e-6, as ``tf.train.exponential_decay``; with
``staircase=true`` in stairs. After every training batch of the ``sparse``
variant, the winner frequencies update the lifetime-boosting state (Algorithm
1), which lives in buffers of the network and is therefore checkpointed and
resumed with it. ``docs/methods/sparsecaps.md`` tabulates every setting where
the paper, the reference code and selfcaps differ.

Variants (``--variant``): ``sparse`` (the method), ``dense`` (no mask: every
capsule reaches the decoder) and ``supervised`` (SUPCAPS, Sabour et al.'s
CapsNet: 10 digit capsules, margin loss m+ 0.9, m- 0.1, lambda 0.5, plus the
reconstruction of the label-masked capsule weighted by 0.0005).

Model selection: ``best.ckpt`` has the lowest ``val_loss`` on the validation
split carved from the training set (the training objective on validation
images with the model in eval mode: the reconstruction loss for ``sparse`` and
``dense``, margin + weighted reconstruction with label masks for
``supervised``). The online kNN on the unmasked capsules (``val_knn_top1``) is
logged as a progress signal only.

Evaluation (paper section 3.1): an RBF SVM (``eval.svm_c`` 100, ``eval.svm_gamma``
0.1) on the latent capsules, encoded with the model in eval mode:

* ``svm_mnist``: fit on MNIST training codes, test on the MNIST test split;
* ``svm_affnist_a`` (protocol a): fit on affNIST codes, test on a disjoint set of
  affNIST images;
* ``svm_affnist_b`` (protocol b): fit on MNIST training codes, test on the same
  affNIST test images as (a).

Two feature kinds, both reported. The headline ``svm_<protocol>`` reads the unmasked
capsules ``v`` (the 256-D routing output): section 2.3, "Note that in SPARSECAPS
latent capsule boosting and masking is only applied to reconstruction output and
only affects capsule training", and the reference code, whose mask acts only inside
its reconstruction (``_remake``) and whose classifier fits the SVM on the exported
``capsule_output``, the routing output before any mask, which settles how its Table 1
was produced. ``svm_<protocol>_masked`` reads eq. 4's ``v' = m v``, the reading of
section 2.3.1 ("v' (equation 4) replaces v as the output of the latent capsules layer
used for classification and reconstruction"); for ``dense`` the mask of eq. 3 is
applied after the fact, for ``supervised`` the longest capsule is kept.
:func:`svm_metric` also reads ``metrics.json`` files written before this layout
(``svm_<protocol>_unmasked`` and a headline chosen by ``eval.feature``). affNIST is
the official test split under ``<root>/affNIST`` when present, else
``affnist_like`` (32 random transformations of each MNIST test digit in affNIST's
ranges, :mod:`selfcaps.data.affine`); ``affnist_source`` says which.
``eval.affnist_test`` and ``eval.affnist_fit`` count images; how the two sets of
protocol (a) are drawn is ``eval.affnist_halves`` (:mod:`~selfcaps.methods.affnist_halves`).
``eval.svm_max_train`` caps the SVM training sets and ``eval.svm_max_test`` the MNIST
test images (seeded random subsets are encoded), for CPU time.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, Subset

from selfcaps.caps import caps_length
from selfcaps.config_checks.sparsecaps import FEATURE_KINDS
from selfcaps.config_checks.sparsecaps import check as check_sparsecaps_config
from selfcaps.data import DatasetNotFoundError, get_dataset, pad_to_canvas
from selfcaps.data.affine import place_in_canvas
from selfcaps.data.affnist import AffNISTLikeDataset
from selfcaps.data.dataset import ImageDataset
from selfcaps.data.shift_grid import ShiftGridDataset
from selfcaps.eval import svm_probe
from selfcaps.losses import MarginLoss, reconstruction_loss
from selfcaps.methods.affnist_halves import affnist_halves
from selfcaps.methods.base import CapsuleMethod
from selfcaps.methods.datamodule import TransformDataset, mix_seed
from selfcaps.methods.evaluation import collect_features
from selfcaps.methods.figures import Figure, ImageGrid, LinePlot
from selfcaps.models import create_model
from selfcaps.models.sparsecaps import SparseCapsNet, winner_frequency

__all__ = [
    "CanvasTransform",
    "SparseCaps",
    "equivariance_sweep",
    "rank_frequency",
    "ranked_support",
    "svm_key",
    "svm_metric",
]

PROTOCOLS = ("mnist", "affnist_a", "affnist_b")


def svm_key(protocol: str, kind: str) -> str:
    """The ``metrics.json`` key of an SVM accuracy: ``v`` is the headline, the others suffixed.

    Args:
        protocol: ``mnist``, ``affnist_a`` or ``affnist_b``.
        kind: ``unmasked`` (v, section 2.3 and the reference classifier), ``masked``
            (v' = m v, eq. 4) or ``pixels``.

    Examples:
        >>> svm_key("affnist_a", "unmasked"), svm_key("affnist_a", "masked")
        ('svm_affnist_a', 'svm_affnist_a_masked')
    """
    return f"svm_{protocol}" if kind == "unmasked" else f"svm_{protocol}_{kind}"


def svm_metric(metrics: dict[str, Any], protocol: str, kind: str) -> float | None:
    """An SVM accuracy of a run's ``metrics.json``, in this layout or the one before it.

    Runs written before the headline read ``v`` hold ``svm_<protocol>_unmasked`` and
    ``svm_<protocol>_masked``, with ``svm_<protocol>`` set by ``eval.feature`` (``v'``
    for ``sparse`` by default): the suffixed keys are read first, so both layouts give
    the feature asked for.

    Args:
        metrics: The parsed ``metrics.json``.
        protocol: See :func:`svm_key`.
        kind: See :func:`svm_key`.

    Returns:
        The accuracy in percent, or None if the run did not compute it.

    Examples:
        >>> old = {"svm_mnist": 90.0, "svm_mnist_masked": 90.0, "svm_mnist_unmasked": 94.0}
        >>> new = {"svm_mnist": 94.0, "svm_mnist_masked": 90.0}
        >>> svm_metric(old, "mnist", "unmasked"), svm_metric(new, "mnist", "unmasked")
        (94.0, 94.0)
    """
    for key in (f"svm_{protocol}_{kind}", svm_key(protocol, kind)):
        if metrics.get(key) is not None:
            return float(metrics[key])
    return None


class CanvasTransform:
    """uint8 ``(C, H, W)`` -> float in ``[0, 1]``, placed in a square canvas.

    With ``max_shift > 0`` the image is shifted by random integers in
    ``[-max_shift, max_shift]`` (training; torch's global RNG, which the data
    module seeds per sample), else centred (evaluation; a 40x40 affNIST image in
    a 40x40 canvas is unchanged).

    Args:
        canvas: Canvas side, or ``None`` to keep the image size.
        max_shift: Largest shift in pixels.

    Examples:
        >>> CanvasTransform(40)(torch.full((1, 28, 28), 255, dtype=torch.uint8)).sum().item()
        784.0
    """

    def __init__(self, canvas: int | None, max_shift: int = 0) -> None:
        self.canvas, self.max_shift = canvas, max_shift

    def __call__(self, img: Tensor) -> Tensor:
        """The transformed image."""
        if self.canvas:
            if self.max_shift:
                img = pad_to_canvas(img, self.canvas, self.max_shift)
            else:
                img = place_in_canvas(img, self.canvas, 0, 0)
        return img.float().div_(255.0) if img.dtype == torch.uint8 else img.float()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(canvas={self.canvas}, max_shift={self.max_shift})"


def _length_accuracy(lengths: Tensor, labels: Tensor) -> float:
    """Accuracy (percent) of CapsNet's prediction, the longest digit capsule."""
    return 100.0 * float((lengths.argmax(1) == labels).float().mean())


class SparseCaps(CapsuleMethod):
    """Sparse unsupervised capsules (see the module docstring).

    Args:
        cfg: Run configuration (``model``, ``loss``, ``augment`` and ``eval`` sections
            as in ``configs/sparsecaps_*.yaml``).
    """

    name: ClassVar[str] = "sparsecaps"
    monitor_feature: ClassVar[str] = "unmasked"
    monitor_metric: ClassVar[tuple[str, str]] = ("val_loss", "min")

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        loss = self.cfg.loss
        self.margin = MarginLoss(loss.m_pos, loss.m_neg, loss.lambda_)
        self._test_stats: tuple[Tensor, Tensor, Tensor] | None = None
        self._affnist_ranks: Tensor | None = None

    # ------------------------------------------------------------------ network
    @property
    def image_size(self) -> int:
        """Side of the network's input: the canvas, else the dataset's image size."""
        canvas = self.cfg.augment.canvas
        if canvas:
            return int(canvas)
        if self.info.image_size is None:
            raise ValueError(f"augment.canvas: {self.cfg.data.name} needs a canvas size")
        return int(self.info.image_size[0])

    @property
    def variant(self) -> str:
        """``sparse``, ``dense`` or ``supervised``."""
        return str(self.cfg.model.variant)

    def build_network(self) -> nn.Module:
        """SparseCaps' autoencoder for this dataset's channels and the canvas size."""
        cfg = self.model_config()
        return create_model(cfg["model"], **cfg["model_kwargs"])

    def model_config(self) -> dict[str, Any]:
        """Model name and kwargs, including channels, input size and number of classes."""
        cfg = super().model_config()
        cfg["model_kwargs"].update(
            in_chans=self.info.channels,
            image_size=self.image_size,
            num_classes=self.info.num_classes,
        )
        return cfg

    @property
    def sparse_net(self) -> SparseCapsNet:
        """The uncompiled network, typed."""
        net = self.network
        assert isinstance(net, SparseCapsNet)
        return net

    @property
    def exhaustive_shifts(self) -> bool:
        """``augment.shift_order=exhaustive``: every shift of each digit in turn."""
        return self.cfg.augment.get("shift_order", "random") == "exhaustive"

    def build_transforms(self) -> tuple[CanvasTransform, CanvasTransform]:
        """Random shifts inside the canvas for training; centred for evaluation.

        With ``augment.shift_order=exhaustive`` the training images arrive already
        shifted (:meth:`training_dataset`), so the training transform only scales them.
        """
        a = self.cfg.augment
        canvas = int(a.canvas) if a.canvas else None
        shift = 0 if self.exhaustive_shifts else int(a.max_shift)
        return CanvasTransform(canvas, shift), CanvasTransform(canvas)

    def training_dataset(self, train: Dataset) -> Dataset:
        """The training split; with ``augment.shift_order=exhaustive``, each digit at every shift.

        ``exhaustive`` is the reference code's training file: each digit at all 169
        shifts in [-6, 6]^2, digit after digit
        (:class:`~selfcaps.data.shift_grid.ShiftGridDataset`); with
        ``data.shuffle_buffer=5000`` it is also read as the reference reads it. An epoch
        is then 169 times longer, so such runs are budgeted by ``--max-steps``.
        """
        if not self.exhaustive_shifts:
            return train
        a = self.cfg.augment
        return ShiftGridDataset(train, int(a.canvas), int(a.max_shift))

    @classmethod
    def validate_config(cls, cfg: DictConfig) -> None:
        """Check the SparseCaps keys; errors name the key (:mod:`selfcaps.config_checks`)."""
        check_sparsecaps_config(cfg)

    # ----------------------------------------------------------------- training
    def _scheduler(self, opt: torch.optim.Optimizer) -> Any:
        r"""The base schedules; ``step`` with ``optim.staircase=false`` decays smoothly.

        :math:`\eta_t = \eta_0 \cdot \gamma^{t / s}` with ``gamma`` and ``step_size``
        ``s`` from ``optim``, floored at ``optim.min_lr``: the reference code's
        ``tf.train.exponential_decay`` (no stairs), then ``tf.maximum(lr, 1e-6)``
        (its ``models/model.py``). ``staircase=true`` (or absent) is ``StepLR``.
        """
        o = self.cfg.optim
        if o.scheduler != "step" or o.get("staircase", True):
            return super()._scheduler(opt)
        gamma, period = float(o.gamma), float(o.step_size)
        floor = float(o.get("min_lr", 0.0)) / float(o.lr)
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda t: max(gamma ** (t / period), floor))

    def _objective(self, batch: Any) -> tuple[Tensor, dict[str, Tensor], Any]:
        x, y = batch
        out = self.net(x, labels=y if self.variant == "supervised" else None)
        recon = reconstruction_loss(out.recon, x)
        logs: dict[str, Tensor] = {"recon": recon.detach()}
        if self.variant == "supervised":
            lengths = caps_length(out.capsules)
            loss = self.margin(lengths, y) + self.cfg.loss.supervised_recon_weight * recon
            logs["acc"] = (lengths.argmax(1) == y).float().mean()
        else:
            loss = recon
        return loss, logs, out

    def compute_loss(self, batch: Any) -> tuple[Tensor, dict[str, Tensor]]:
        """Reconstruction (plus margin for ``supervised``); updates the boosting state.

        Algorithm 1: the ranks of this training batch update the winner-frequency
        EMA, and every ``model.boost_every`` batches the boost values (``sparse`` only).
        """
        loss, logs, out = self._objective(batch)
        boosting = self.sparse_net.boosting
        if self.variant == "sparse" and self.training:
            freq = winner_frequency(out.ranks)
            if self._trainer is not None and self.trainer.world_size > 1:
                freq = self.trainer.strategy.reduce(freq, reduce_op="mean")
            boosting.update(freq)
        logs["boost_max"] = boosting.boost.max()
        logs["winner_ema_max"] = boosting.freq_ema.max()
        logs["mask_nonzero"] = (out.mask > 0).float().sum(1).mean()
        return loss, logs

    # --------------------------------------------------------------- validation
    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Validation objective on the validation split; capsules for the online kNN."""
        x, y = batch
        if dataloader_idx == 0:  # the kNN bank
            self._val_store[0].append((self.features(x)[self.monitor_feature].float(), y))
            return
        loss, logs, out = self._objective(batch)
        self._val_store[1].append((out.capsules.flatten(1).float(), y))
        kw = {"on_epoch": True, "batch_size": x.shape[0], "sync_dist": True}
        self.log("val_loss", loss, prog_bar=True, add_dataloader_idx=False, **kw)
        for k, v in logs.items():
            self.log(f"val_{k}", v, add_dataloader_idx=False, **kw)

    # ------------------------------------------------------------------ features
    def _outputs(self, x: Tensor) -> dict[str, Tensor]:
        """Features and routing statistics of a batch (model in eval mode)."""
        net = self.sparse_net
        v, psi = net.encode(x)
        ranks = net.rank(psi)
        mask = net.feature_mask(v, ranks)
        return {
            "unmasked": v.flatten(1),
            "masked": (v * mask.unsqueeze(-1)).flatten(1),
            "support": psi,
            "ranks": ranks,
            "mask": mask,
            "lengths": caps_length(v),
            "pixels": x.flatten(1),
        }

    def features(self, x: Tensor) -> dict[str, Tensor]:
        """``unmasked`` (``L * D`` latent capsules) and ``masked`` (eq. 4) features."""
        out = self._outputs(x)
        return {k: out[k] for k in FEATURE_KINDS}

    # ---------------------------------------------------------------- evaluation
    def _encode(
        self, ds: Dataset, kinds: list[str], indices: list[int] | None = None
    ) -> tuple[dict[str, Tensor], Tensor]:
        """Outputs ``kinds`` of :meth:`_outputs` over a dataset (or some of its items)."""
        _, eval_tf = self.build_transforms()
        part: Dataset = ds
        if indices is not None:  # affnist_like renders the chosen images in one call
            part = ds.select(indices) if isinstance(ds, ImageDataset) else Subset(ds, indices)
        d = self.cfg.data
        loader = DataLoader(
            TransformDataset(part, eval_tf),
            batch_size=int(d.eval_batch_size),
            shuffle=False,
            num_workers=int(d.num_workers),
        )
        return collect_features(self, loader, self._outputs, kinds)

    def _affnist(self, dm: Any) -> tuple[Dataset, str]:
        """The affNIST test images: official files if present (``auto``), else generated."""
        choice, root = str(self.cfg.eval.affnist), self.cfg.data.root
        source = getattr(dm, "root_source", None)
        if choice in ("auto", "affnist"):
            try:
                ds = get_dataset("affnist", root=root, split="test", root_source=source)
                return ds, "affnist (official test split)"
            except DatasetNotFoundError:
                if choice == "affnist":
                    raise
                warnings.warn(
                    "affNIST files not found; evaluating on affnist_like (32 random "
                    "transformations of each MNIST test digit in affNIST's ranges) instead",
                    stacklevel=2,
                )
        ds = self._affnist_like(dm)
        return ds, f"affnist_like ({ds.versions} versions of each {ds.source} digit)"

    def _affnist_like(self, dm: Any, split: str = "test") -> AffNISTLikeDataset:
        """The generated affNIST split: versions of the MNIST ``test`` or ``train`` digits."""
        ds = get_dataset(
            "affnist_like",
            root=self.cfg.data.root,
            split="test" if split == "test" else "train_full",
            root_source=getattr(dm, "root_source", None),
        )
        assert isinstance(ds, AffNISTLikeDataset)
        return ds

    def _subset(self, n_total: int, n: int | None, salt: int) -> list[int]:
        """A seeded random choice of ``n`` indices (sorted), all of them if ``n`` is None."""
        if n is None or n >= n_total:
            return list(range(n_total))
        g = torch.Generator().manual_seed(mix_seed(self.cfg.seed, salt))
        return torch.randperm(n_total, generator=g)[:n].sort().values.tolist()

    def evaluate(self, dm: Any) -> dict[str, float | int | str]:
        """SVM protocols on MNIST and affNIST, per feature kind, plus routing statistics."""
        e = self.cfg.eval
        kinds = list(FEATURE_KINDS) + (["pixels"] if e.baselines else [])
        stats = ["support", "ranks", "mask", "lengths"]
        max_train = int(e.svm_max_train) if e.svm_max_train else None
        train = dm.split("train")
        train_idx = self._subset(len(train), max_train, 0x5F17)
        tr, tr_y = self._encode(train, kinds, train_idx)
        test = dm.split("test")
        max_test = int(e.svm_max_test) if e.get("svm_max_test") else None
        test_idx = self._subset(len(test), max_test, 0x7E57)
        te, te_y = self._encode(test, kinds + stats, test_idx)
        self._test_stats = (te["support"], te["ranks"].long(), te["mask"])
        feats = {"mnist": ((tr, tr_y), (te, te_y))}
        metrics: dict[str, float | int | str] = {
            "variant": self.variant,
            "svm_c": float(e.svm_c),
            "svm_gamma": float(e.svm_gamma),
            "svm_train_mnist": len(train_idx),
            "svm_test_mnist": len(test_idx),
        }
        if e.affnist != "none":
            aff, metrics["affnist_source"] = self._affnist(dm)
            mode = str(e.get("affnist_halves", "permutation"))
            aff_train = self._affnist_like(dm, "train") if mode == "train_digits" else None
            halves = affnist_halves(
                len(aff),  # type: ignore[arg-type]
                int(e.affnist_fit),
                int(e.affnist_test),
                mode,
                max_train,
                versions=getattr(aff, "versions", 1),
                n_train=len(aff_train) if aff_train is not None else None,
            )
            af_te, af_te_y = self._encode(aff, [*kinds, "lengths", "ranks"], halves.test)
            self._affnist_ranks = af_te["ranks"].long()
            fit_ds = aff_train if aff_train is not None else aff
            af_fit, af_fit_y = self._encode(fit_ds, kinds, halves.fit)
            feats["affnist_a"] = ((af_fit, af_fit_y), (af_te, af_te_y))
            feats["affnist_b"] = ((tr, tr_y), (af_te, af_te_y))
            metrics.update(
                affnist_fit_images=len(halves.fit),
                affnist_test_images=len(halves.test),
                affnist_halves=mode,
            )
            if self.variant == "supervised":
                metrics["capsnet_acc_affnist"] = _length_accuracy(af_te["lengths"], af_te_y)
        else:
            metrics["affnist_source"] = "none (eval.affnist=none)"
        for protocol, ((fit, fit_y), (test, test_y)) in feats.items():
            for kind in kinds:
                gamma = "scale" if kind == "pixels" else float(e.svm_gamma)
                res = svm_probe(fit[kind], fit_y, test[kind], test_y, C=float(e.svm_c), gamma=gamma)
                metrics[svm_key(protocol, kind)] = float(res["top1"])
        metrics.update(self._routing_metrics(*self._test_stats))
        if self.variant == "supervised":
            metrics["capsnet_acc_mnist"] = _length_accuracy(te["lengths"], te_y)
        return metrics

    def _routing_metrics(self, support: Tensor, ranks: Tensor, mask: Tensor) -> dict[str, float]:
        """Summary numbers of the routing statistics over the MNIST test split."""
        share = support / support.sum(1, keepdim=True).clamp_min(1e-12)
        wins = winner_frequency(ranks)
        boost = self.sparse_net.boosting.boost
        return {
            "support_top1_share": 100.0 * float(share.max(1).values.mean()),
            "winning_capsules": int((wins >= 0.01).sum()),
            "mask_nonzero": float((mask > 0).float().sum(1).mean()),
            "boost_max": float(boost.max()),
            "boost_min": float(boost.min()),
        }

    # ------------------------------------------------------------------- figures
    def figures(self, dm: Any) -> dict[str, Figure]:
        """Paper Figs. 2-5 (reconstructions, routing support, rank frequency, equivariance).

        Fig. 3 uses the MNIST test split; Fig. 4 the affNIST test images of
        protocol (a) when they were evaluated (the paper's Fig. 4: "over 10,000
        affNIST test images"), else the MNIST test split.
        """
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                if self._test_stats is None:
                    test = dm.split("test")
                    n = int(self.cfg.eval.figure_images)
                    out, _ = self._encode(
                        test, ["support", "ranks", "mask"], self._subset(len(test), n, 0xF16)
                    )
                    self._test_stats = (out["support"], out["ranks"].long(), out["mask"])
                support, ranks, _ = self._test_stats
                if self._affnist_ranks is not None:
                    ranks, where = self._affnist_ranks, "affNIST test images"
                else:
                    where = "MNIST test images"
                images, labels = self._figure_images(dm)
                return {
                    "fig2_reconstructions": self._fig_reconstructions(images),
                    "fig3_routing_support": support_plot(
                        {self.variant: ranked_support(support)}, support.shape[0]
                    ),
                    "fig4_rank_frequency": rank_frequency_plot(
                        rank_frequency(ranks), f"{self.variant}, {ranks.shape[0]} {where}"
                    ),
                    "fig5_equivariance": equivariance_sweep(
                        self.sparse_net, images[0], int(labels[0])
                    ),
                }
        finally:
            self.train(was_training)

    def _figure_images(self, dm: Any, count: int = 4) -> tuple[Tensor, Tensor]:
        """``count`` test images spread over the split, through the evaluation transform."""
        test = dm.split("test")
        _, eval_tf = self.build_transforms()
        idx = torch.linspace(0, len(test) - 1, count).long().tolist()
        items = [test[i] for i in idx]
        x = torch.stack([eval_tf(img) for img, _ in items]).to(self.device)
        return x, torch.tensor([int(t) for _, t in items])

    def _fig_reconstructions(self, x: Tensor) -> ImageGrid:
        """Fig. 2: input, all capsules, each capsule alone; input, all, each left out."""
        net = self.sparse_net
        v, psi = net.encode(x)
        mask = net.decoder_mask(v, net.rank(psi), None)
        L = v.shape[1]
        eye = torch.eye(L, device=v.device)
        rows, labels = [], []
        for k in range(x.shape[0]):
            vk, mk = v[k], mask[k]
            full = net.decode((vk * mk.unsqueeze(-1)).unsqueeze(0))
            alone = net.decode(eye.unsqueeze(-1) * vk.unsqueeze(0))
            out = net.decode((1 - eye).unsqueeze(-1) * (vk * mk.unsqueeze(-1)).unsqueeze(0))
            for name, recon in (("alone", alone), ("leave-one-out", out)):
                rows.append(torch.cat([x[k : k + 1], full, recon]))
                labels.append(f"{k}: {name}")
        return ImageGrid(
            torch.cat(rows).cpu(),
            nrow=L + 2,
            title=(
                f"{self.variant}: input | all capsules | capsule 0..{L - 1} alone (or left out)"
            ),
            row_labels=labels,
        )


def ranked_support(support: Tensor) -> Tensor:
    r"""Paper Fig. 3: each image's routing support :math:`\psi` sorted, relative to its rank 0.

    "We rank latent capsules by their aggregate routing coefficients
    :math:`\psi_j` ... The ranked values are scaled by :math:`\psi_j` of the
    capsule with rank 0", averaged over images. Unboosted support, so that a
    sparse and a dense network are compared on the routing alone.

    Args:
        support: ``(N, L)`` routing support of ``N`` images.

    Returns:
        ``(L,)``: the mean over images of the ``r``-th largest support divided by the largest.

    Examples:
        >>> ranked_support(torch.tensor([[1.0, 4.0, 2.0], [3.0, 3.0, 3.0]]))
        tensor([1.0000, 0.7500, 0.6250])
    """
    ranked = support.sort(dim=1, descending=True).values
    return (ranked / ranked[:, :1].clamp_min(1e-12)).mean(0)


def rank_frequency(ranks: Tensor) -> Tensor:
    """Paper Fig. 4: how often each capsule achieves each rank.

    Args:
        ranks: ``(N, L)`` ranks (a permutation of ``0 .. L-1`` per image).

    Returns:
        ``(L, L)``: entry ``[j, r]`` is the fraction of images in which capsule ``j``
        has rank ``r``; rows and columns sum to 1.

    Examples:
        >>> rank_frequency(torch.tensor([[0, 1], [0, 1], [1, 0]]))
        tensor([[0.6667, 0.3333],
                [0.3333, 0.6667]])
    """
    L = ranks.shape[1]
    return F.one_hot(ranks.long(), L).float().mean(0)


def support_plot(curves: dict[str, Tensor], images: int) -> LinePlot:
    """Fig. 3 as a line plot: one :func:`ranked_support` curve per network, and uniform."""
    L = next(iter(curves.values())).numel()
    xs = [float(r) for r in range(L)]
    series = {name: (xs, [float(v) for v in c]) for name, c in curves.items()}
    series["all capsules equal"] = (xs, [1.0] * L)
    return LinePlot(
        series,
        xlabel="rank of the latent capsule (0 = most routing support)",
        ylabel="support / support of rank 0",
        title=f"ranked routing support, mean over {images} test images (paper Fig. 3)",
    )


def rank_frequency_plot(freq: Tensor, what: str) -> LinePlot:
    """Fig. 4 as a line plot: one line per capsule over the ranks (:func:`rank_frequency`)."""
    L = freq.shape[0]
    xs = [float(r) for r in range(L)]
    return LinePlot(
        {f"capsule {j}": (xs, [100.0 * float(f) for f in freq[j]]) for j in range(L)},
        xlabel="rank (0 = most boosted support)",
        ylabel="% of images with this rank",
        title=f"rank frequency of each latent capsule ({what}; paper Fig. 4)",
    )


def equivariance_sweep(net: SparseCapsNet, x: Tensor, label: int) -> ImageGrid:
    """Paper Fig. 5: each parameter of the most active capsule set to -1, -0.8, ..., 1.

    The other capsules keep their values and the decoder's mask (eq. 3 for
    ``sparse``, all ones for ``dense``); the most active capsule is the one of
    rank 0 (the longest for ``supervised``) and is passed unmasked.

    Args:
        net: The network (eval mode).
        x: One image ``(C, H, W)``.
        label: Its class, for the title.
    """
    v, psi = net.encode(x.unsqueeze(0))
    ranks = net.rank(psi)
    lengths = caps_length(v)[0]
    top = int(lengths.argmax() if net.variant == "supervised" else ranks[0].argmin())
    mask = net.decoder_mask(v, ranks, None)
    mask[:, top] = 1.0
    values = torch.linspace(-1.0, 1.0, 11, device=v.device)
    D = v.shape[2]
    swept = (v * mask.unsqueeze(-1)).repeat(D * len(values), 1, 1)
    for d in range(D):
        swept[d * len(values) : (d + 1) * len(values), top, d] = values
    return ImageGrid(
        net.decode(swept).cpu(),
        nrow=len(values),
        title=(
            f"{net.variant}: capsule {top} (most active) of a test '{label}', "
            "one parameter per row set to -1.0 ... 1.0 in steps of 0.2"
        ),
        row_labels=[f"dim {d}" for d in range(D)],
    )
