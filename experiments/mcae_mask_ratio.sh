#!/usr/bin/env bash
# MCAE mask-ratio sweep : does the share of masked patches change what the encoder's
# capsules learn? For each seed and mask ratio, pretrain the `quick` network on all 45,000
# CIFAR-10 training images, then fit a linear probe on its frozen encoder capsules with a
# stratified 10% of the labels (4,500 images, subset = the seed), against the same probe on the
# untrained network of the same seed (`--pretrain-epochs 0`: its checkpoint holds the initial
# weights, identical for every mask ratio). The paper's ratio is 0.5 (section 4, Fig. 3).
#
# Usage: experiments/mcae_mask_ratio.sh OUT_DIR
# Environment: DATA_ROOT (default ./data), PRETRAIN_EPOCHS (default 1), RATIOS (default
#   "0.25 0.5 0.75"), SEEDS (default "0 1 2").
# Each run also finetunes one epoch on the labelled 10% (the run's own evaluation; the
# finetuning key is not what the sweep compares). Report:
#   python experiments/mcae_mask_ratio_report.py OUT_DIR
set -euo pipefail
source "$(dirname "$0")/run_state.sh"
out=$1
epochs=${PRETRAIN_EPOCHS:-1}
ratios=${RATIOS:-0.25 0.5 0.75}
seeds=${SEEDS:-0 1 2}
common=(--data cifar10 --data-root "${DATA_ROOT:-./data}" --threads 1 --no-progress
        data.train_subset=null eval.label_fraction=0.1 eval.finetune_epochs=1)
probe() {  # RUN_DIR: the linear probe on the frozen capsules, once
  grep -q '"linear_top1_capsule_lf10"' "$1/metrics.json" || python -m selfcaps eval "$1" \
    --protocol linear --label-fraction 0.1 --feature capsule --threads 1 --no-progress
}
for s in $seeds; do  # seeds outermost: a sweep cut short still pairs every ratio it reached
  run="$out/untrained_s$s"
  finished "$run" || python -m selfcaps run mcae --out "$run" --resume --seed "$s" \
    --pretrain-epochs 0 "${common[@]}"
  probe "$run"
  for r in $ratios; do
    run="$out/mask${r}_s$s"
    finished "$run" || python -m selfcaps run mcae --out "$run" --resume --seed "$s" \
      --pretrain-epochs "$epochs" "model.mask_ratio=$r" "${common[@]}"
    probe "$run"
  done
done
