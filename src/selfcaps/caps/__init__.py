"""Capsule mathematics: squash/unsquash, routing algorithms and capsule layers (pure torch)."""

from selfcaps.caps.functional import (
    caps_length,
    safe_norm,
    squash,
    squashed_length,
    unit_vector,
    unsquash,
)
from selfcaps.caps.fused_routing import fused_dense_routing
from selfcaps.caps.layers import (
    ConvCaps2d,
    DenseCaps,
    PrimaryCaps2d,
    SelfRouting1d,
    SelfRouting2d,
    SelfRoutingDense,
    child_votes,
    flatten_caps,
    route_in_autocast_dtype,
    unfold_caps,
    use_fused_routing,
    votes_in_bf16,
)
from selfcaps.caps.master_aide import (
    CapFC,
    CapsuleModule,
    MasterAideConv2d,
    caps_to_channels,
    channels_to_caps,
    squash_channels,
)
from selfcaps.caps.routing import dynamic_routing, em_routing, self_routing

__all__ = [
    "CapFC",
    "CapsuleModule",
    "ConvCaps2d",
    "DenseCaps",
    "MasterAideConv2d",
    "PrimaryCaps2d",
    "SelfRouting1d",
    "SelfRouting2d",
    "SelfRoutingDense",
    "caps_length",
    "caps_to_channels",
    "channels_to_caps",
    "child_votes",
    "dynamic_routing",
    "em_routing",
    "flatten_caps",
    "fused_dense_routing",
    "route_in_autocast_dtype",
    "safe_norm",
    "self_routing",
    "squash",
    "squash_channels",
    "squashed_length",
    "unfold_caps",
    "unit_vector",
    "unsquash",
    "use_fused_routing",
    "votes_in_bf16",
]
