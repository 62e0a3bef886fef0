"""Speculative decoding: the draft tree, verification, the decode loop and ``generate``."""
