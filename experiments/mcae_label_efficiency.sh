#!/usr/bin/env bash
# MCAE label efficiency on CIFAR-10: pretrain on all 45,000 training images without labels,
# then finetune the whole network (backbone, encoder, new class capsules) on a stratified 10% of
# the labels (4,500 images), against the same network finetuned from scratch on the same
# labelled images.
#
# Usage: experiments/mcae_label_efficiency.sh OUT_DIR
# Environment: DATA_ROOT (default ./data), PRETRAIN_EPOCHS (default 20), FRACTION (default 0.1),
#   SEEDS (default "0 1 2"), PRETRAIN_SEED (default 0), FINETUNE_EPOCHS (default: the preset's 8).
#
# One pretraining run (seed PRETRAIN_SEED; about 70 minutes for 20 epochs on one core) finetunes
# on the subset of its own seed within the run; `selfcaps eval --label-seed S` finetunes the
# same pretrained weights on the subsets of the other seeds (keys `..._ls<S>`). Each scratch run
# (`--pretrain-epochs 0`, seed S) finetunes on subset S. The pairs share the labelled images;
# the pretrained arm's seeds share one pretraining, so the spread is that of finetuning and of
# the subset, not of pretraining. With FINETUNE_EPOCHS=N the pretrained weights are finetuned
# again for N epochs by `selfcaps eval --finetune-epochs N` (keys `..._ftN`) and the scratch runs
# go to scratch_ftN_s<S>.
# FINETUNE_EPOCHS=80 at FRACTION=0.1 gives the 4,500 labelled images the finetuning steps that
# FRACTION=1 gives all 45,000 (2,880 vs 2,808): the rung where pretraining holds (+5.1 points,
# docs/methods/mcae.md); at the preset's 8 epochs (288 steps) and at 20 (720) it was not resolved.
# FRACTION=1 is the paper's comparison (every label): the pretrained weights are finetuned again
# with `selfcaps eval --seed S` (another batch order and augmentation, keys `..._seed<S>`), and
# the scratch runs finetune on all 45,000 labelled images.
# Report: experiments/mcae_label_efficiency_report.py OUT_DIR [--fraction F]
set -euo pipefail
source "$(dirname "$0")/run_state.sh"
out=$1
epochs=${PRETRAIN_EPOCHS:-20}
fraction=${FRACTION:-0.1}
seeds=${SEEDS:-0 1 2}
pre_seed=${PRETRAIN_SEED:-0}
ft=${FINETUNE_EPOCHS:-}
common=(--data cifar10 --data-root "${DATA_ROOT:-./data}" --threads 1 --no-progress
        data.train_subset=null)
labels=(--label-fraction "$fraction")
draw=(--label-seed)
if [ "$fraction" = 1 ]; then
  labels=()
  draw=(--seed)
else
  common+=("eval.label_fraction=$fraction")
fi
pre="$out/pretrained_s$pre_seed"
finished "$pre" || python -m selfcaps run mcae --out "$pre" --resume --seed "$pre_seed" \
  --pretrain-epochs "$epochs" "${common[@]}"
for s in $seeds; do
  scratch="$out/scratch_s$s"
  ft_args=()
  if [ -n "$ft" ]; then
    scratch="$out/scratch_ft${ft}_s$s"
    ft_args=(--finetune-epochs "$ft")
  fi
  if [ "$s" != "$pre_seed" ] || [ -n "$ft" ]; then
    python -m selfcaps eval "$pre" --protocol finetune "${labels[@]}" "${draw[@]}" "$s" \
      "${ft_args[@]}" --threads 1 --no-progress
  fi
  finished "$scratch" || python -m selfcaps run mcae --out "$scratch" --resume \
    --seed "$s" --pretrain-epochs 0 "${ft_args[@]}" "${common[@]}"
done
