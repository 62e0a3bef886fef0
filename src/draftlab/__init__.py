"""draftlab: inspect, check, probe and benchmark EAGLE-3 drafters against their targets."""

__version__ = "0.1.0"
