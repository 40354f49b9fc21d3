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
:func:`~selfcaps.methods.sparsecaps.svm.svm_metric` also reads ``metrics.json`` files
written before this layout (``svm_<protocol>_unmasked`` and a headline chosen by
``eval.feature``). affNIST is
the official test split under ``<root>/affNIST`` when present, else
``affnist_like`` (32 random transformations of each MNIST test digit in affNIST's
ranges, :mod:`selfcaps.data.affine`); ``affnist_source`` says which.
``eval.affnist_test`` and ``eval.affnist_fit`` count images; how the two sets of
protocol (a) are drawn is ``eval.affnist_halves``
(:mod:`~selfcaps.methods.sparsecaps.affnist_halves`).
``eval.svm_max_train`` caps the SVM training sets and ``eval.svm_max_test`` the MNIST
test images (seeded random subsets are encoded), for CPU time.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, ClassVar

import torch
from omegaconf import DictConfig
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, Subset

from selfcaps.caps import caps_length
from selfcaps.config.checks.sparsecaps import FEATURE_KINDS
from selfcaps.config.checks.sparsecaps import check as check_sparsecaps_config
from selfcaps.data import DatasetNotFoundError, get_dataset, pad_to_canvas
from selfcaps.data.affine import place_in_canvas, place_in_canvases
from selfcaps.data.affnist import AffNISTLikeDataset
from selfcaps.data.datamodule import TransformDataset, loader_kwargs, mix_seed
from selfcaps.data.dataset import ImageDataset
from selfcaps.data.shift_grid import ShiftGridDataset
from selfcaps.eval.method_metrics import collect_features
from selfcaps.losses import MarginLoss, reconstruction_loss, squared_error_per_image
from selfcaps.methods.base import CapsuleMethod
from selfcaps.methods.sparsecaps.figures import RoutingStatistics, sparsecaps_figures
from selfcaps.methods.sparsecaps.svm import svm_evaluation
from selfcaps.models import create_model
from selfcaps.models.sparsecaps import SparseCapsNet, winner_frequency
from selfcaps.viz.figures import Figure

__all__ = ["CanvasTransform", "SparseCaps"]


class CanvasTransform:
    """uint8 ``(C, H, W)`` -> float in ``[0, 1]``, placed in a square canvas.

    With ``max_shift > 0`` the image is shifted by random integers in
    ``[-max_shift, max_shift]`` (training; torch's global RNG, which the data
    module seeds per sample), else centred (evaluation; a 40x40 affNIST image in
    a 40x40 canvas is unchanged).

    On an accelerator the shifts run per batch (:attr:`batches_on_accelerator`): the loader
    workers draw each image's shift (:meth:`item_params`, the same draw from the same seeded
    generator as the per-image path) and collate uint8 images, and :meth:`apply` places the
    whole batch on the device (:func:`~selfcaps.data.affine.place_in_canvases`): the same
    canvases, bit for bit.

    Args:
        canvas: Canvas side, or ``None`` to keep the image size.
        max_shift: Largest shift in pixels.

    Examples:
        >>> CanvasTransform(40)(torch.full((1, 28, 28), 255, dtype=torch.uint8)).sum().item()
        784.0
    """

    def __init__(self, canvas: int | None, max_shift: int = 0) -> None:
        self.canvas, self.max_shift = canvas, max_shift

    @property
    def batches_on_accelerator(self) -> bool:
        """Random shifts run per batch on an accelerator (the data module asks)."""
        return bool(self.canvas and self.max_shift)

    def item_params(self, img: Tensor) -> Tensor:
        """The shift ``[dx, dy]`` (int64) :func:`~selfcaps.data.affine.pad_to_canvas` draws.

        Its one draw, from the global generator: ``torch.randint`` of two integers.
        """
        return torch.randint(-self.max_shift, self.max_shift + 1, (2,))

    def apply(self, images: Tensor, params: Tensor) -> Tensor:
        """A collated batch ``(B, C, H, W)`` with its shifts ``(B, 2)`` as floats in canvases."""
        dx, dy = params.to(images.device).unbind(1)
        return _to_float(place_in_canvases(images, int(self.canvas), dx, dy))

    def __call__(self, img: Any, generator: torch.Generator | None = None) -> Tensor:
        """The transformed image; :meth:`apply` for a collated ``(images, shifts)`` batch.

        ``generator`` (passed by the training engine to batch transforms) is not used: the
        shifts came drawn.
        """
        if isinstance(img, list | tuple):
            return self.apply(*img)
        if self.canvas:
            if self.max_shift:
                img = pad_to_canvas(img, self.canvas, self.max_shift)
            else:
                img = place_in_canvas(img, self.canvas, 0, 0)
        return _to_float(img)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(canvas={self.canvas}, max_shift={self.max_shift})"


def _to_float(img: Tensor) -> Tensor:
    """uint8 -> float in ``[0, 1]`` (``/ 255``); float images as they are, in float32."""
    return img.float().div_(255.0) if img.dtype == torch.uint8 else img.float()


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
        """Check the SparseCaps keys; errors name the key (:mod:`selfcaps.config.checks`)."""
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
    def _outputs(self, x: Tensor, recon_error: bool = False) -> dict[str, Tensor]:
        """Features and routing statistics of a batch (model in eval mode).

        With ``recon_error``, also each image's reconstruction error (the decoder runs
        only then: features, the online kNN and the SVM codes do not need it).
        """
        net = self.sparse_net
        v, psi = net.encode(x)
        ranks = net.rank(psi)
        mask = net.feature_mask(v, ranks)
        out = {
            "unmasked": v.flatten(1),
            "masked": (v * mask.unsqueeze(-1)).flatten(1),
            "support": psi,
            "ranks": ranks,
            "mask": mask,
            "lengths": caps_length(v),
            "pixels": x.flatten(1),
        }
        if recon_error:  # per image: the training loss's summed squared error, without labels
            recon = net.decode(v * net.decoder_mask(v, ranks, None).unsqueeze(-1))
            out["recon_error"] = squared_error_per_image(recon, x).unsqueeze(1)
        return out

    def features(self, x: Tensor) -> dict[str, Tensor]:
        """``unmasked`` (``L * D`` latent capsules) and ``masked`` (eq. 4) features."""
        out = self._outputs(x)
        return {k: out[k] for k in FEATURE_KINDS}

    # ---------------------------------------------------------------- evaluation
    def encode(
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
            **loader_kwargs(self.cfg),
        )
        fn = functools.partial(self._outputs, recon_error="recon_error" in kinds)
        return collect_features(self, loader, fn, kinds)

    def affnist_test(self, dm: Any) -> tuple[Dataset, str]:
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
        ds = self.affnist_like(dm)
        return ds, f"affnist_like ({ds.versions} versions of each {ds.source} digit)"

    def affnist_like(self, dm: Any, split: str = "test") -> AffNISTLikeDataset:
        """The generated affNIST split: versions of the MNIST ``test`` or ``train`` digits."""
        ds = get_dataset(
            "affnist_like",
            root=self.cfg.data.root,
            split="test" if split == "test" else "train_full",
            root_source=getattr(dm, "root_source", None),
        )
        assert isinstance(ds, AffNISTLikeDataset)
        return ds

    def seeded_subset(self, n_total: int, n: int | None, salt: int) -> list[int]:
        """A seeded random choice of ``n`` indices (sorted), all of them if ``n`` is None."""
        if n is None or n >= n_total:
            return list(range(n_total))
        g = torch.Generator().manual_seed(mix_seed(self.cfg.seed, salt))
        return torch.randperm(n_total, generator=g)[:n].sort().values.tolist()

    def evaluate(self, dm: Any) -> dict[str, float | int | str]:
        """SVM protocols on MNIST and affNIST, per feature kind, plus routing statistics."""
        return svm_evaluation(self, dm)

    def routing_statistics(self, dm: Any) -> RoutingStatistics:
        """What Figs. 3 and 4 show, whether or not the final evaluation ran.

        Fig. 3: the routing support of ``eval.figure_images`` MNIST test images (a seeded
        choice). Fig. 4: the ranks of as many affNIST test images (the paper's Fig. 4:
        "over 10,000 affNIST test images"; the source :meth:`affnist_test` picks), or of
        the same MNIST test images with ``eval.affnist=none``.
        """
        n = int(self.cfg.eval.figure_images)
        test = dm.split("test")
        out, _ = self.encode(test, ["support", "ranks"], self.seeded_subset(len(test), n, 0xF16))
        ranks, where = out["ranks"].long(), "MNIST test images"
        if self.cfg.eval.affnist != "none":
            aff, _ = self.affnist_test(dm)
            idx = self.seeded_subset(len(aff), n, 0xF17)  # type: ignore[arg-type]
            ranks, where = (
                self.encode(aff, ["ranks"], idx)[0]["ranks"].long(),
                "affNIST test images",
            )
        return RoutingStatistics(out["support"], ranks, where)

    # ------------------------------------------------------------------- figures
    def figures(self, dm: Any) -> dict[str, Figure]:
        """Paper Figs. 2-5 (:func:`~selfcaps.methods.sparsecaps.figures.sparsecaps_figures`).

        Figs. 3 and 4 read :meth:`routing_statistics`, so they are the same figures
        after ``selfcaps run`` and ``selfcaps pretrain``.
        """
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                images, labels = self._figure_images(dm)
                stats = self.routing_statistics(dm)
                return sparsecaps_figures(self.sparse_net, images, labels, stats)
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
