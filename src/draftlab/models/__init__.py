"""The runtime speculative decoding runs on: the target with aux capture, and the EAGLE-3 drafter."""

from draftlab.models.drafter import DraftStep, Eagle3Drafter
from draftlab.models.target import BatchStep, TargetRunner, TargetStep

__all__ = ["BatchStep", "DraftStep", "Eagle3Drafter", "TargetRunner", "TargetStep"]
