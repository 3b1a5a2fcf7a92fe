"""``python -m orchestrator.cli``: the same as the ``orchestrator`` command."""

import sys

from orchestrator.cli import main

sys.exit(main())
