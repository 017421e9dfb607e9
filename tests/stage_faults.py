"""`python tests/stage_faults.py OVERRIDES`: corpusprep's command line, with one thing done
to its files from outside just before a stage of the driver runs, as an unlucky user's
other shell would do it: CORPUSPREP_FAULT=<stage>:<what>, a stage being a function of
corpusprep.prepare (encode, merge_parts, export, commit) and <what> one of:

    move_out_dir      out_dir renamed away          remove_out_dir  out_dir removed
    remove_input      the (first) input removed     truncate_input  cut to half its size
    append_input      a line added to it
    move_out_dir_relocked  out_dir renamed away, and another run makes a new one by that
                      name and holds its lock there
    sigterm_in_callback  a SIGTERM whose handler runs inside a weakref's callback, where
                      Python only prints an exception it cannot raise (as a real one may land)
"""

from __future__ import annotations

import os
import shutil
import sys

import corpusprep.prepare as prepare

_HELD: list[int] = []


def _fault(run, what: str) -> None:
    out_dir, path = str(run.out.out_dir), run.files[0].path
    if what == "move_out_dir":
        os.rename(out_dir, out_dir + ".moved")
    elif what == "move_out_dir_relocked":
        import fcntl

        os.rename(out_dir, out_dir + ".moved")
        os.mkdir(out_dir)
        fd = os.open(os.path.join(out_dir, ".corpusprep.lock"), os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        _HELD.append(fd)  # as long as this process lives, as another run's would be
        if run.out._work is not None:  # and a work folder by the same key (same input)
            os.makedirs(run.out._work)
            open(os.path.join(run.out._work, "theirs"), "w").close()
    elif what == "remove_out_dir":
        shutil.rmtree(out_dir)
    elif what == "remove_input":
        os.unlink(path)
    elif what == "truncate_input":
        os.truncate(path, os.path.getsize(path) // 2)
    elif what == "append_input":
        with open(path, "a") as f:
            f.write("one more line\n")
    elif what == "sigterm_in_callback":
        import signal
        import weakref

        class Thing:
            pass

        thing = Thing()
        weakref.finalize(thing, os.kill, os.getpid(), signal.SIGTERM)
        del thing  # the callback runs now: the handler at its next step, inside it
    else:
        raise SystemExit(f"stage_faults: unknown fault {what!r}")


def _install(spec: str) -> None:
    stage, what = spec.split(":")
    real = getattr(prepare, stage)

    def faulty(run, *args, **kwargs):
        _fault(run, what)
        return real(run, *args, **kwargs)

    setattr(prepare, stage, faulty)


if __name__ == "__main__":
    if os.environ.get("CORPUSPREP_FAULT"):
        _install(os.environ["CORPUSPREP_FAULT"])
    from corpusprep.app import main

    sys.argv[0] = "corpusprep"
    main()
