"""Evaluation protocols: kNN, linear and SVM probes, fine-tuning, top-k metrics, params/FLOPs.

Every protocol takes plain tensors, ``torch.utils.data`` datasets or DataLoaders
and returns a flat dict of numbers (accuracies in percent).
"""

from selfcaps.eval.features import extract_features, extract_named_features
from selfcaps.eval.finetune import FinetuneModule, finetune
from selfcaps.eval.knn import KNNEvaluator, knn_evaluate, knn_predict
from selfcaps.eval.linear import linear_probe
from selfcaps.eval.metrics import accuracy_from_predictions, topk_accuracy, topk_correct
from selfcaps.eval.profile import count_flops, count_parameters, format_profile, profile_model
from selfcaps.eval.svm import svm_probe

__all__ = [
    "FinetuneModule",
    "KNNEvaluator",
    "accuracy_from_predictions",
    "count_flops",
    "count_parameters",
    "extract_features",
    "extract_named_features",
    "finetune",
    "format_profile",
    "knn_evaluate",
    "knn_predict",
    "linear_probe",
    "profile_model",
    "svm_probe",
    "topk_accuracy",
    "topk_correct",
]
