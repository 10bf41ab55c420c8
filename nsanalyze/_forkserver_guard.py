"""Imported first, and only, by the multiprocessing fork server of `nsanalyze batch`
(set_forkserver_preload): the server ends with the CLI that started it, even when that is killed with
SIGKILL, so its workers (which end with it, batch._die_with_parent) do not outlive a batch."""

import ctypes
import os
import signal

try:
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG (Linux)
except (OSError, AttributeError):
    pass
if os.getppid() == 1:  # the CLI died before the signal was set: nobody will use this server
    os._exit(0)
