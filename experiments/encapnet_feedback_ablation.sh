#!/usr/bin/env bash
# EncapNet feedback-unit ablation on CIFAR-10 at a fixed step budget (issue 19).
#
# Usage: experiments/encapnet_feedback_ablation.sh OUT_DIR RUN [RUN ...]
#   RUN is one of the names below; each run is one `selfcaps run encapnet` of the quick preset with
#   master-only capConvs, one epoch over a seeded random subset of SUBSET training images (default
#   25,600: 200 steps of 128 images), logging the gradient probe every 20 steps.
#   The 60-minute version: SUBSET=null EPOCHS=18 (6,318 steps over all 45,000 images; issue 19
#   measured 3 master-only epochs, 1,053 steps, in 10 minutes on one otherwise idle core).
# Environment: DATA_ROOT (default ./data), EPOCHS (default 1), SUBSET (default 25600),
#   VARIANT (default master).
set -euo pipefail
out=$1
shift
epochs=${EPOCHS:-1}
subset=${SUBSET:-25600}
variant=${VARIANT:-master}
common=(--data cifar10 --data-root "${DATA_ROOT:-./data}" --threads 1 --no-progress
        --epochs "$epochs" --variant "$variant" "data.train_subset=$subset" trainer.max_time=null
        loss.probe_every=20)
# Two units in each module as the paper's final model (section 5.1), except the one that
# compares 4x4 maps (f_phi reduces them to one number; cosine cost then has no gradient).
paper_units='[[1,0,-1],[1,1,-1],[2,0,-1],[2,1,-1],[3,0,-1]]'
for run in "$@"; do
  case $run in
    off_s0) args=(--ot off --seed 0) ;;
    off_s1) args=(--ot off --seed 1) ;;
    on_s0) args=(--ot on --seed 0) ;;
    on_s1) args=(--ot on --seed 1) ;;
    lambda1_s0) args=(--ot on --seed 0 loss.ot_weight=1) ;;
    lambda1_s1) args=(--ot on --seed 1 loss.ot_weight=1) ;;
    paperunits_s0) args=(--ot on --seed 0 "loss.units=$paper_units") ;;
    paperunits_lambda1_s0) args=(--ot on --seed 0 "loss.units=$paper_units" loss.ot_weight=1) ;;
    plangrad_s0) args=(--ot on --seed 0 loss.detach_plan=false) ;;
    *) echo "unknown run $run" >&2; exit 2 ;;
  esac
  python -m selfcaps run encapnet --out "$out/$run" "${common[@]}" "${args[@]}"
done
