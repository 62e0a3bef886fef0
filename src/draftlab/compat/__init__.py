"""Will this drafter load and run correctly on this target, in this engine? And the fixes.

:func:`check_pair` returns findings with stable codes (see the README's list); :func:`fix_pair`
writes a corrected copy of the drafter.
"""

from draftlab.compat.check import check_pair
from draftlab.compat.findings import CheckResult, Finding
from draftlab.compat.fix import FixResult, fix_pair

__all__ = ["CheckResult", "Finding", "FixResult", "check_pair", "fix_pair"]
