"""``python -m qdqc ARGS``: the ``qdqc`` command line (the same code as the binary)."""

import signal
import sys

from . import _qdqc

if __name__ == "__main__":
    # Ctrl-C stops the process as it stops the binary (files staged so far are removed by the next run).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(_qdqc.cli(sys.argv[1:]))
