"""How EncapNet learns: margin loss plus feedback-agreement divergences, evaluated by top-1 error.

Training (Li et al., ECCV 2018, section 3.3; reference ``main.py``): the class
scores are the class-capsule lengths, trained with the margin loss
(``m+ = 0.9``, ``m- = 0.1``, ``lambda = 0.5``); with ``loss.ot`` on, every
feedback agreement unit adds its divergence between regenerated and actual
lower capsules:

    loss = margin + loss.ot_weight * sum_units D(f(g(higher)), f(lower))

(paper ``lambda = 10``; the reference code's ``--ot_loss_fac`` default is 1).
``loss.units`` lists the units as ``[module, lower tap, higher tap]``, taps
numbered ``0`` = module input, ``1`` = Type I output, ``2..`` = Type II outputs,
``-1`` = module output. Preset ``paper`` has the paper's "two Sinkhorn losses
imposed on each module" (section 5.1): ``[m, 0, 2]`` (module input regenerated
from the first Type II output) and ``[m, 1, -1]`` (Type I output from the module
output) in every module but the last's 4x4 one; preset ``reference`` has the
reference code's ``[[3, 1, -1], [4, 0, 2]]``. ``loss.probe_every`` logs each
term's loss and the norm of the gradient it sends into the network
(:func:`gradient_probe`). The units belong to
this LightningModule, not to the network: they train with it, are saved in
its checkpoints, and neither ``model.safetensors`` nor the inference path
contains them.

Optimiser (preset ``paper``): Adam, lr 1e-4, weight decay 5e-4, batch 128,
600 epochs, lr x0.1 at epochs 200, 300, 400.

Evaluation: ``best.ckpt`` is the epoch with the highest top-1 on the
validation split carved from train (``val_top1``; the reference reports the
best *test* epoch); the final metrics are ``test_top1``, ``test_top5`` and
``test_error`` on the test split, once, through the deterministic transform
(the reference crops randomly at test time).

Networks with logit outputs (the ResNet-18-shaped counterpart, Table 1's
CNN) are trained with cross-entropy instead of the margin loss; EM capsule
networks use their class activations as scores.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchvision.transforms import v2

from selfcaps.caps import caps_length, squashed_length
from selfcaps.caps.chunking import cpu_path
from selfcaps.config.checks.encapnet import OTHER_NETWORKS
from selfcaps.config.checks.encapnet import check as check_encapnet_config
from selfcaps.eval import topk_correct
from selfcaps.eval.method_metrics import evaluation_record
from selfcaps.losses import FeedbackAgreement, KLDivergence, MarginLoss, SinkhornDivergence
from selfcaps.losses.feedback import feedback_features
from selfcaps.methods.base import CapsuleMethod
from selfcaps.models import create_model

__all__ = ["EncapNetMethod", "gradient_probe"]


def gradient_probe(first: Tensor, second: Tensor, params: list[Tensor]) -> dict[str, float]:
    """Norms of the gradients two loss terms send into ``params``, and their cosine.

    Args:
        first: One scalar loss term (the classification loss).
        second: Another scalar term of the same graph (the weighted feedback divergences).
        params: The shared weights (parameters that receive no gradient count as zero).

    Returns:
        ``probe_grad_cls``, ``probe_grad_ot``, ``probe_grad_ratio`` (ot / cls) and
        ``probe_grad_cos`` (cosine between the two flattened gradients).

    Examples:
        >>> w = torch.tensor([1.0, 2.0], requires_grad=True)
        >>> s = gradient_probe((w * w).sum(), 3 * w[0], [w])
        >>> round(s["probe_grad_ot"], 3), round(s["probe_grad_cos"], 3)
        (3.0, 0.447)
    """
    params = [p for p in params if p.requires_grad]
    grads = []
    for term in (first, second):
        g = torch.autograd.grad(term, params, retain_graph=True, allow_unused=True)
        grads.append(
            torch.cat(
                [
                    (gi if gi is not None else torch.zeros_like(p)).flatten()
                    for gi, p in zip(g, params, strict=True)
                ]
            )
        )
    a, b = grads
    na, nb = float(a.norm()), float(b.norm())
    return {
        "probe_grad_cls": na,
        "probe_grad_ot": nb,
        "probe_grad_ratio": nb / na if na > 0 else float("inf"),
        "probe_grad_cos": float(a @ b) / (na * nb) if na > 0 and nb > 0 else 0.0,
    }


class EncapNetMethod(CapsuleMethod):
    """Neural network encapsulation (see the module docstring).

    Args:
        cfg: Run configuration (``model``, ``loss``, ``augment`` sections as in
            ``configs/encapnet_*.yaml``).
    """

    name: ClassVar[str] = "encapnet"
    monitor_feature: ClassVar[str] = "capsule"
    monitor_metric: ClassVar[tuple[str, str]] = ("val_top1", "max")
    knn_monitor: ClassVar[bool] = False

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        c = self.cfg.loss
        self.margin = MarginLoss(c.m_pos, c.m_neg, c.lambda_)
        self.feedback = nn.ModuleList(self._feedback_units() if c.ot else [])
        self._val = torch.zeros(2)

    # ------------------------------------------------------------ network
    def model_config(self) -> dict[str, Any]:
        """Model name and kwargs, with the data's channels, classes and image size."""
        cfg = super().model_config()
        name, kwargs = cfg["model"], cfg["model_kwargs"]
        if name in OTHER_NETWORKS:
            kwargs = {k: kwargs[k] for k in OTHER_NETWORKS[name]}
        kwargs["in_chans"] = self.info.channels
        kwargs["num_classes"] = self.info.num_classes
        kwargs["input_size"] = self.input_size
        return {"model": name, "model_kwargs": kwargs}

    @property
    def input_size(self) -> int:
        """Side length of the images the network sees (``model.input_size`` or the data's)."""
        size = self.cfg.model.input_size
        if size is None:
            if self.info.image_size is None:
                raise ValueError(
                    f"model.input_size: {self.cfg.data.name} has no fixed image size; set one"
                )
            size = self.info.image_size[0]
        return int(size)

    def build_network(self) -> nn.Module:
        """EncapNet (or another network of ``models/encapnet.py``) for this dataset."""
        cfg = self.model_config()
        return create_model(cfg["model"], **cfg["model_kwargs"])

    def _feedback_units(self) -> list[FeedbackAgreement]:
        c = self.cfg.loss
        shapes = self.network.tap_shapes()
        units = []
        for module, lower, higher in c.units:
            taps = shapes[module - 1]
            _, h, w = taps[lower]
            if c.extractor and c.cost == "cosine" and -(-h // 4) * -(-w // 4) < 2:
                raise ValueError(
                    f"loss.units: {[module, lower, higher]} compares {h}x{w} maps, which the "
                    "feature extractor reduces to one number (cosine cost: always 0 or 1); "
                    "use a tap of at least 5x5, or loss.extractor=false"
                )
            if c.divergence == "kl":
                div: nn.Module = KLDivergence()
            else:
                div = SinkhornDivergence(
                    c.epsilon, c.iters, c.cost, c.debias, c.detach_plan, c.objective
                )
            units.append(
                FeedbackAgreement(
                    taps[higher],
                    taps[lower],
                    div,
                    num_caps=self.network.num_caps if c.encapsulated_generator else None,
                    extractor=c.extractor,
                )
            )
        return units

    # ------------------------------------------------------------ data
    def build_transforms(self) -> tuple[Any, Any]:
        """Random crop and flip for training (``augment.recipe``); a deterministic evaluation."""
        a, info, size = self.cfg.augment, self.info, self.input_size
        flip = a.hflip if a.hflip is not None else info.channels == 3 and info.name != "svhn"
        normalize = [v2.ToDtype(torch.float32, scale=True), v2.Normalize(info.mean, info.std)]
        if a.recipe == "reference":  # resize 32 -> 40, crop 32; jitter 0.2
            big = round(size * 1.25)
            fit: list[Any] = [v2.Resize(big, antialias=True)]
            crop, extra = v2.RandomCrop(size), [v2.ColorJitter(0.2, 0.2, 0.2, 0.2)]
        else:  # pad and crop
            fit = [] if info.image_size == (size, size) else [v2.Resize(size, antialias=True)]
            crop, extra = v2.RandomCrop(size, padding=a.crop_padding), []
        flips = [v2.RandomHorizontalFlip()] if flip else []
        extra = extra if info.channels == 3 else []
        train = v2.Compose([*fit, crop, *flips, *extra, *normalize])
        evaluate = v2.Compose([*fit, v2.CenterCrop(size), *normalize])
        return train, evaluate

    # ------------------------------------------------------------ training
    def scores(self, out: Tensor) -> Tensor:
        """Class scores ``(B, K)`` from the network's output (capsule lengths, or as they are)."""
        if out.dim() != 3:
            return out
        return caps_length(out) if cpu_path(out) else squashed_length(out)  # CapFC squashes

    def _classification_loss(self, scores: Tensor, y: Tensor) -> Tensor:
        if self.network.score_kind == "logit":
            return F.cross_entropy(scores, y)
        return self.margin(scores, y)

    def compute_loss(self, batch: Any) -> tuple[Tensor, dict[str, Tensor]]:
        """Margin loss plus ``ot_weight`` times the feedback divergences."""
        x, y = batch
        if len(self.feedback):
            out, taps = self.compiled(self.network.forward_taps)(x)
        else:
            out, taps = self.net(x), []
        scores = self.scores(out)
        cls_loss = self._classification_loss(scores, y)
        logs = {
            "train_cls_loss": cls_loss.detach(),
            "train_top1": (scores.argmax(1) == y).float().mean() * 100.0,
        }
        if not len(self.feedback):
            return cls_loss, logs
        ot = self._feedback_divergence(taps)
        weighted_ot = self.cfg.loss.ot_weight * ot
        logs["train_ot_loss"] = ot.detach()
        if self._probe_due():
            self._log_gradient_probe(cls_loss, weighted_ot)
        return cls_loss + weighted_ot, logs

    def _feedback_divergence(self, taps: list[Any]) -> Tensor:
        """The sum of the units' divergences (eq. 11 per unit).

        On an accelerator, when every unit compares with one Sinkhorn divergence, the units'
        features come from :func:`~selfcaps.losses.feedback.feedback_features` (generators of
        one output shape share their ReLU and squash, each extractor convolves its two inputs
        at once) and all units' transport problems run in one batched loop
        (:meth:`SinkhornDivergence.many`): the launches of one unit instead of one per unit.
        The CPU path calls unit by unit.
        """
        inputs = [
            (taps[m - 1][hi], taps[m - 1][lo])
            for m, lo, hi in (tuple(u) for u in self.cfg.loss.units)
        ]
        div = self.feedback[0].divergence
        shared = isinstance(div, SinkhornDivergence) and all(
            repr(u.divergence) == repr(div) for u in self.feedback
        )
        units = list(zip(self.feedback, inputs, strict=True))
        if not shared or cpu_path(inputs[0][0]):
            return sum(self.compiled(u)(*xy) for u, xy in units)
        return div.many(self.compiled(self._unit_features)(inputs)).sum()

    def _unit_features(self, inputs: list[tuple[Tensor, Tensor]]) -> list[tuple[Tensor, Tensor]]:
        """Every feedback unit's feature pair, together (accelerator path)."""
        return feedback_features(list(self.feedback), inputs)

    def _probe_due(self) -> bool:
        every = int(self.cfg.loss.probe_every)
        trainer = self._trainer  # None outside fit (no logging possible)
        return bool(every) and trainer is not None and (self.global_step + 1) % every == 0

    def _log_gradient_probe(self, cls_loss: Tensor, weighted_ot: Tensor) -> None:
        """Log each loss term and the gradient it alone sends into the network's weights.

        ``probe_grad_cls`` = ||d margin / d theta||, ``probe_grad_ot`` = ||d (lambda sum W) /
        d theta|| over the network parameters theta (the units' own g_psi, f_phi excluded),
        ``probe_grad_cos`` = the cosine between the two gradients, ``probe_grad_ratio`` = ot / cls.
        """
        stats = gradient_probe(cls_loss, weighted_ot, list(self.network.parameters()))
        stats["probe_cls_loss"] = float(cls_loss.detach())
        stats["probe_ot_loss"] = float(weighted_ot.detach())
        for k, v in stats.items():
            self.log(k, v, on_step=True, on_epoch=False, batch_size=1)

    def features(self, x: Tensor) -> dict[str, Tensor]:
        """Class capsules (flattened; logits for CNNs) and class scores."""
        out = self.network(x)
        return {"capsule": out.flatten(1), "scores": self.scores(out)}

    # ------------------------------------------------------------ validation
    def on_validation_epoch_start(self) -> None:
        """Reset the validation counts."""
        self._val = torch.zeros(2, device=self.device)

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Count correct top-1 predictions on the validation split."""
        x, y = batch
        correct = topk_correct(self.scores(self.network(x)), y, ks=(1,))["top1"]
        self._val += torch.tensor([correct, len(y)], device=self.device, dtype=self._val.dtype)

    def on_validation_epoch_end(self) -> None:
        """Log ``val_top1`` (percent), summed over processes."""
        counts = self.trainer.strategy.reduce(self._val, reduce_op="sum")
        if counts[1] > 0:
            self.log("val_top1", float(100.0 * counts[0] / counts[1]), prog_bar=True)

    # ------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, dm: Any) -> dict[str, float | int | str]:
        """Top-1 / top-5 accuracy and top-1 error on the test split (percent), and the setting."""
        was = self.training
        self.eval()
        counts = {"top1": 0, "top5": 0}
        n = 0
        try:
            for x, y in dm.eval_loader("test"):
                res = topk_correct(self.scores(self.network(x.to(self.device))), y, ks=(1, 5))
                counts = {k: counts[k] + res[k] for k in counts}
                n += len(y)
        finally:
            self.train(was)
        top1 = 100.0 * counts["top1"] / n
        c = self.cfg.loss
        record = evaluation_record(
            "eval_test", "test", n, "train", len(dm.split("train")), self.network
        )
        return {
            **record,
            "test_top1": top1,
            "test_top5": 100.0 * counts["top5"] / n,
            "test_error": 100.0 - top1,
            "test_images": n,
            "network": str(self.cfg.model.name),
            "variant": str(getattr(self.network, "variant", "n/a")),
            "ot": "on" if c.ot else "off",
            "ot_setting": (
                f"{c.divergence}, units {[list(u) for u in c.units]}, weight {c.ot_weight}, "
                f"eps {c.epsilon}, L {c.iters}, {c.cost}, debias {c.debias}, "
                f"detach_plan {c.detach_plan}"
                if c.ot
                else "off"
            ),
        }

    # ------------------------------------------------------------ configuration
    @classmethod
    def validate_config(cls, cfg: Any) -> None:
        """Check EncapNet's keys; the message names the key (:mod:`selfcaps.config.checks`)."""
        check_encapnet_config(cfg)
