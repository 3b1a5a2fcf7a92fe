"""Commands a test signals the way a terminal would."""

from __future__ import annotations

import signal


def as_foreground_job() -> None:
    """In the child before exec: SIGINT at its default, as a shell starts a foreground job.
    A suite started in the background (``pytest ... &``) has SIGINT ignored, and an
    ignored signal stays ignored across exec: the command would rightly never see Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
