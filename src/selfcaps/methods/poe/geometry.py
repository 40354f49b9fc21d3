"""How many of its 16 dimensions a PoE capsule uses, and where its samples fall.

A capsule's pose is 16-dimensional, and Algorithm 1 does not constrain how many directions it
uses: capsule ``j``'s encoder map ``W_j`` (every primary capsule's 8 dimensions to its
16, a ``4,608 x 16`` matrix) and its decoder map ``U_j`` (``16 x 4,608``) can each approach
rank one. Their *rank-one share*, the fraction of the squared Frobenius norm held by the top
singular value,

    share(A) = s_1(A)^2 / sum_k s_k(A)^2,

is 1 for a map of rank one and ``1 / 16`` for 16 orthogonal directions of equal size. When
``U_j`` is near rank one, capsule ``j`` generates along one curve: its votes are
``squash(x) U_j``, about ``s_1 (squash(x) . a_j) b_j`` with ``a_j`` and ``b_j`` the top singular
vectors of ``U_j``, so a draw with ``x . a_j`` near 0 decodes to about the image of a zero pose
(the training set's mean code, with ``model.center``), whatever the rest of the draw.

:func:`angle_agreement` reads that on samples: the share of a capsule's restricted-domain
samples that the judge gives the capsule's majority class, per bin of the draw's cosine to
the capsule's mean pose ``m_j`` (the direction that defines the restricted half-sphere).
:func:`pose_angles` gives the cosines of the test images' own poses to ``m_j``: where on the
sphere the data's poses lie. :func:`pole_purity` reads the complete domain's draws around each
pole of ``m_j`` separately.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor
from torch.nn import functional as F

from selfcaps.caps.layers import DenseCaps
from selfcaps.methods.poe.judge import class_purity
from selfcaps.methods.poe.selectivity import loader_poses
from selfcaps.models.poe import PoECapsNet

__all__ = [
    "angle_agreement",
    "angle_bins",
    "decoder_axis_alignment",
    "decoder_maps",
    "encoder_maps",
    "equalize_encoder_maps",
    "mean_pose_cos",
    "pole_purity",
    "pose_angles",
    "rank_metrics",
    "require_mean_poses",
    "top_singular_share",
]


def top_singular_share(maps: Tensor) -> Tensor:
    """Rank-one share ``s_1^2 / sum_k s_k^2`` of each matrix in a stack.

    Args:
        maps: ``(k, m, n)`` matrices, none all-zero.

    Returns:
        ``(k,)`` shares in ``[1 / min(m, n), 1]`` (computed in float64).

    Raises:
        ValueError: Not a 3-D stack, or a matrix that is all zero (its share is undefined).
    """
    if maps.dim() != 3:
        raise ValueError(f"expected a (k, m, n) stack of matrices, got shape {tuple(maps.shape)}")
    sv2 = torch.linalg.svdvals(maps.detach().double()).pow(2)
    total = sv2.sum(-1)
    if not bool((total > 0).all()):
        zero = (total == 0).nonzero().flatten().tolist()
        raise ValueError(f"matrices {zero} are all zero: their rank-one share is undefined")
    return (sv2[:, 0] / total).float()


def encoder_maps(layer: DenseCaps) -> Tensor:
    """Each output capsule's map from all inputs, ``(out_caps, in_caps * in_dim, out_dim)``.

    ``layer.weight`` is ``(in_caps, in_dim, out_caps * out_dim)`` with the vote of input ``i``
    for output ``j`` ``u_i @ weight[i, :, j*out_dim:(j+1)*out_dim]``.
    """
    in_caps, in_dim, _ = layer.weight.shape
    w = layer.weight.detach().reshape(in_caps * in_dim, layer.out_caps, -1)
    return w.permute(1, 0, 2)


@torch.no_grad()
def equalize_encoder_maps(layer: DenseCaps) -> None:
    """Make every output capsule's map 16 orthogonal directions of equal size, in place.

    Each ``W_j`` (:func:`encoder_maps`, ``m x d``) is replaced by the nearest matrix with
    orthogonal columns of equal norm and the same Frobenius norm (the polar factor, Loewdin's
    symmetric orthogonalisation): ``W_j (W_j^T W_j)^(-1/2) |W_j|_F / sqrt(d)``. Its column space
    is kept; its rank-one share becomes ``1 / d``. ``cd.orthogonal_encoder`` applies it after
    every stage-2 step (not the paper: a test of whether capsules that must use all their pose
    dimensions draw purer samples).

    Raises:
        ValueError: A map whose columns are linearly dependent (no polar factor to keep).
    """
    w = layer.weight
    in_caps, in_dim, _ = w.shape
    maps = encoder_maps(layer).double()  # (out_caps, m, d)
    gram = maps.transpose(1, 2) @ maps
    evals, evecs = torch.linalg.eigh(gram)
    if not bool((evals > 1e-12 * evals[:, -1:].clamp_min(1e-300)).all()):
        raise ValueError("equalize_encoder_maps: a capsule's map has linearly dependent columns")
    inv_sqrt = evecs @ torch.diag_embed(evals.rsqrt()) @ evecs.transpose(1, 2)
    scale = maps.flatten(1).norm(dim=1).view(-1, 1, 1) / maps.shape[-1] ** 0.5
    equal = (maps @ inv_sqrt * scale).permute(1, 0, 2).reshape(in_caps, in_dim, -1)
    w.copy_(equal.to(w.dtype))


def decoder_maps(layer: DenseCaps) -> Tensor:
    """Each input capsule's map to all outputs, ``(in_caps, in_dim, out_caps * out_dim)``."""
    return layer.weight.detach()


def rank_metrics(net: PoECapsNet, suffix: str = "") -> dict[str, float]:
    """Mean rank-one share over the capsules of ``W_j`` and ``U_j``; also the smallest."""
    out: dict[str, float] = {}
    for name, maps in (
        ("encoder", encoder_maps(net.encoder)),
        ("decoder", decoder_maps(net.decoder)),
    ):
        share = top_singular_share(maps)
        out[f"{name}_rank1_share{suffix}"] = float(share.mean())
        out[f"{name}_rank1_share_min{suffix}"] = float(share.min())
    return out


def decoder_axis_alignment(net: PoECapsNet) -> Tensor:
    """``|cos|`` between each capsule's decoding direction and its mean pose ``m_j``.

    The decoding direction is the top left singular vector ``a_j`` of ``U_j`` (16 x 4,608):
    the pose direction whose votes ``U_j`` makes largest. 1 when the capsule decodes along the
    line of its mean pose.

    Raises:
        ValueError: The mean poses were not measured (no stage 3).
    """
    u = torch.linalg.svd(decoder_maps(net.decoder).double(), full_matrices=False)[0]
    return mean_pose_cos(net, u[:, :, 0]).abs().float()


def require_mean_poses(net: PoECapsNet) -> None:
    """Raise ``ValueError`` unless stage 3 measured the capsules' mean poses ``m_j``."""
    if not net.hemisphere_measured:
        raise ValueError("this reading needs the capsules' mean poses, measured in stage 3")


def mean_pose_cos(net: PoECapsNet, poses: Tensor) -> Tensor:
    """Cosine of each pose ``(..., num_caps, out_dim)`` to its capsule's mean pose ``m_j``.

    Raises:
        ValueError: The mean poses were not measured (no stage 3).
    """
    require_mean_poses(net)
    m = F.normalize(net.hemisphere.detach().to(poses), dim=-1)
    return (F.normalize(poses, dim=-1) * m).sum(-1)


def pose_angles(net: PoECapsNet, loader: Any, cfg: Any) -> tuple[Tensor, Tensor]:
    """Cosine of every test pose to its capsule's mean pose ``m_j``, and the pose's length.

    Args:
        net: A network whose stage 3 measured the mean poses (``net.hemisphere``).
        loader: Test images (the first ``eval.max_images`` are read).
        cfg: The run configuration (``eval.max_images``).

    Returns:
        ``(cos, length)``, each ``(N, num_caps)``.

    Raises:
        ValueError: The mean poses were not measured, or the loader yielded no images.
    """
    require_mean_poses(net)  # before encoding the images
    poses, _ = loader_poses(net, loader, cfg)
    return mean_pose_cos(net, poses), poses.norm(dim=-1)


def angle_bins(cos: Tensor, edges: Tensor) -> Tensor:
    """Bin of each cosine against increasing ``edges``.

    Bin ``k`` holds ``edges[k-1] <= cos < edges[k]``; bin 0 everything below ``edges[0]``,
    bin ``len(edges)`` everything from ``edges[-1]``.
    """
    return torch.bucketize(cos, edges, right=True)


def angle_agreement(cos: Tensor, agrees: Tensor, edges: Tensor) -> list[float | None]:
    """Share of samples (percent) agreeing with their capsule's majority, per bin of ``cos``.

    Args:
        cos: ``(N,)`` cosine of each draw to its capsule's mean pose.
        agrees: ``(N,)`` bool, whether the judge gave the sample its capsule's majority class.
        edges: Increasing bin edges; bin ``k`` holds ``edges[k-1] <= cos < edges[k]`` (the first
            bin everything below ``edges[0]``, the last everything from ``edges[-1]``).

    Returns:
        One percentage per bin (``len(edges) + 1``), ``None`` for an empty bin.

    Raises:
        ValueError: ``cos`` and ``agrees`` differ in shape.
    """
    if cos.shape != agrees.shape:
        raise ValueError(f"cos {tuple(cos.shape)} and agrees {tuple(agrees.shape)} differ")
    bins = angle_bins(cos, edges)
    out: list[float | None] = []
    for k in range(len(edges) + 1):
        hit = agrees[bins == k]
        out.append(100.0 * float(hit.float().mean()) if len(hit) else None)
    return out


def pole_purity(cos: Tensor, preds: Tensor, edge: float) -> dict[str, float | int | str]:
    """Per capsule, the class purity of its draws near each pole of its mean pose ``m_j``.

    The draws of the complete domain with ``cos >= edge`` (around ``+m_j``) and with
    ``cos <= -edge`` (around ``-m_j``) are read separately: a capsule whose pose is a signed
    scalar can generate a different digit around each pole.

    Args:
        cos: ``(n, num_caps)`` cosine of each draw to its capsule's mean pose.
        preds: ``(n, num_caps)`` the judge's class for each draw's image.
        edge: How far from the equator a draw must be (``0 <= edge < 1``).

    Returns:
        ``pole_purity_near`` and ``pole_purity_far`` (percent, mean over the capsules with
        draws at that pole), ``pole_majority_near`` / ``pole_majority_far`` (per capsule,
        ``-`` without draws) and ``pole_majorities_differ`` (capsules whose two majorities
        differ, of those with draws at both poles).

    Raises:
        ValueError: ``cos`` and ``preds`` differ in shape, ``edge`` is outside ``[0, 1)``, or
            no capsule has a draw at one of the poles.
    """
    if cos.shape != preds.shape or cos.dim() != 2:
        raise ValueError(f"expected cos and preds (n, num_caps), got {tuple(cos.shape)} and "
                         f"{tuple(preds.shape)}")  # fmt: skip
    if not 0.0 <= edge < 1.0:
        raise ValueError(f"edge: expected 0 <= edge < 1, got {edge}")
    out: dict[str, float | int | str] = {}
    majorities: dict[str, list[int | None]] = {}
    for pole, mask in (("near", cos >= edge), ("far", cos <= -edge)):
        shares, classes = [], []
        for j in range(cos.shape[1]):
            if bool(mask[:, j].any()):
                share, cls = class_purity(preds[mask[:, j], j])
                shares.append(share)
                classes.append(cls)
            else:
                classes.append(None)
        if not shares:
            raise ValueError(f"no draw lies at the {pole} pole (|cos| >= {edge}) of any capsule")
        out[f"pole_purity_{pole}"] = math.fsum(shares) / len(shares)  # the same on every Python
        out[f"pole_majority_{pole}"] = ",".join("-" if c is None else str(c) for c in classes)
        majorities[pole] = classes
    both = [(a, b) for a, b in zip(majorities["near"], majorities["far"], strict=True)
            if a is not None and b is not None]  # fmt: skip
    out["pole_majorities_differ"] = sum(a != b for a, b in both)
    return out
