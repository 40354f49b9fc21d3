#!/usr/bin/env bash
# EncapNet feedback-unit ablation on CIFAR-10 at a fixed step budget.
#
# Usage: experiments/encapnet_feedback_ablation.sh OUT_DIR RUN [RUN ...]
#   RUN is ARM_sSEED (ARM one of the arms below, any seed: off_s0, plangrad_s1, ...); each run
#   is one `selfcaps run encapnet` of the quick preset with master-only capConvs, one epoch
#   over a seeded random subset of SUBSET training images (default 25,600: 200 steps of 128
#   images), logging the gradient probe every 20 steps.
#   The 60-minute version: SUBSET=null EPOCHS=18 (6,318 steps over all 45,000 images; 3
#   master-only epochs, 1,053 steps, took 10 minutes on one otherwise idle core).
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
  # RUN is ARM_sSEED: any seed works for every arm.
  arm=${run%_s*}
  seed=${run##*_s}
  if [[ ! $seed =~ ^[0-9]+$ ]]; then echo "run $run: expected ARM_sSEED, e.g. off_s0" >&2; exit 2; fi
  case $arm in
    off) args=(--ot off) ;;
    on) args=(--ot on) ;;
    lambda1) args=(--ot on loss.ot_weight=1) ;;
    lambda01) args=(--ot on loss.ot_weight=0.1) ;;
    # Adam's second moment with a 100-step memory instead of 1,000 (is the cost the early
    # feedback gradients inflating it for the rest of the run?)
    off_beta99) args=(--ot off 'optim.betas=[0.9,0.99]') ;;
    lambda1_beta99) args=(--ot on loss.ot_weight=1 'optim.betas=[0.9,0.99]') ;;
    paperunits) args=(--ot on "loss.units=$paper_units") ;;
    paperunits_lambda1) args=(--ot on "loss.units=$paper_units" loss.ot_weight=1) ;;
    plangrad) args=(--ot on loss.detach_plan=false) ;;
    eps01) args=(--ot on loss.epsilon=0.1) ;;
    eps10) args=(--ot on loss.epsilon=10) ;;
    *) echo "unknown arm $arm in run $run" >&2; exit 2 ;;
  esac
  python -m selfcaps run encapnet --out "$out/$run" "${common[@]}" --seed "$seed" "${args[@]}"
done
