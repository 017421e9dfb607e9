"""submitit's controller of one local job (hydra/launcher=submitit_local), as submitit runs
it (python -m submitit.local._local FOLDER), but quiet on Ctrl-C.

A terminal's Ctrl-C reaches every process of its group: each job's controller stopped its
job (as it should) and then printed its KeyboardInterrupt traceback on the sweep's
terminal, below corpusprep's one line. corpusprep.launchers starts the controllers here.
"""

import sys
from pathlib import Path

if __name__ == "__main__":
    try:  # importing submitit takes some 0.2 s, as the sweep's jobs start: a Ctrl-C then too
        from submitit.local.local import Controller

        Controller(Path(sys.argv[1])).run()
    except KeyboardInterrupt:  # its run() has stopped the job's tasks (in a finally)
        sys.exit(130)
