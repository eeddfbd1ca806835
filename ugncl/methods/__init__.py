"""Training methods that plug into the one trainer (name -> class)."""

from ugncl.methods.base import Method, StepContext
from ugncl.methods.triplet import TripletMethod
from ugncl.methods.ugncl import UGNCLMethod

METHODS: dict[str, type[Method]] = {"triplet": TripletMethod, "ugncl": UGNCLMethod}

__all__ = ["METHODS", "Method", "StepContext", "TripletMethod", "UGNCLMethod"]
