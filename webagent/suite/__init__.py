"""Website test suites: YAML checks run as a batch, with JUnit and HTML reports (``webagent test``).

``model`` (the suite file and a check's outcome), ``runner``, ``junit``, ``report``, ``cli``.
"""

from .model import CHECK_LIMITS, Check, CheckOutcome, Suite, load_suite
from .runner import SuiteRunner, run_suite

__all__ = ["CHECK_LIMITS", "Check", "CheckOutcome", "Suite", "SuiteRunner", "load_suite", "run_suite"]
