"""A SIGTERM that Python drops (raised inside a finalizer) still stops the process."""

import subprocess
import sys
import time

import pytest

SCRIPT = """
import os, signal, sys
from threshold.interrupt import install, raise_if_interrupted

install()

class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)  # handled here, inside the finalizer

steps = 0
try:
    Finalized()  # collected at once: the KeyboardInterrupt is printed as ignored, then dropped
    steps += 1  # the program goes on, as a worker in training would
    raise_if_interrupted()
    steps += 1
except KeyboardInterrupt:
    print(f"stopped after {steps} step(s)")
    sys.exit(130)
sys.exit(0)
"""


def test_an_interrupt_dropped_in_a_finalizer_is_raised_at_the_next_check_in_silence():
    """The signal lands inside the finalizer (the step after it runs: the interrupt was dropped
    there) and stops the program at the next check; Python's "Exception ignored ...
    KeyboardInterrupt" report of the dropped one is not printed (issue 62: a SQLAlchemy
    finalizer's printed it at a Ctrl-C)."""
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True)
    assert proc.returncode == 130, proc.stderr
    assert proc.stdout.strip() == "stopped after 1 step(s)"
    assert proc.stderr == ""


OTHER = """
import sys
from threshold.interrupt import install

install()

class Broken:
    def __del__(self):
        raise ValueError("a finalizer's own error")

Broken()
print("went on")
"""


def test_another_error_in_a_finalizer_is_still_reported():
    proc = subprocess.run([sys.executable, "-c", OTHER], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "went on"
    assert "Exception ignored" in proc.stderr and "a finalizer's own error" in proc.stderr


STATUS = """
import os, signal, sys
from threshold.interrupt import exit_status, install
install()
try:
    os.kill(os.getpid(), signal.SIG{name})
    signal.pause()
except KeyboardInterrupt:
    sys.exit(exit_status())
"""


@pytest.mark.parametrize(("name", "status"), [("INT", 130), ("TERM", 143)])
def test_the_exit_status_says_which_signal_stopped_the_process(name, status):
    """128 + the signal's number, as a shell reports a process killed by it (SIGTERM: 143)."""
    proc = subprocess.run([sys.executable, "-c", STATUS.format(name=name)], capture_output=True)
    assert proc.returncode == status, proc.stderr


GUARDED = """
import os, signal, sys
import typer
from threshold.cli.common import run_guarded

def body():
    try:
        os.kill(os.getpid(), signal.SIGINT)
        signal.pause()
    except KeyboardInterrupt:  # as torch.save's zip writer raises, closing after Ctrl-C
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos")

try:
    run_guarded(body)
except typer.Exit as e:
    sys.exit(e.exit_code)
"""


def test_a_command_whose_interrupt_surfaces_as_another_error_ends_as_interrupted():
    proc = subprocess.run([sys.executable, "-c", GUARDED], capture_output=True, text=True)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip() == "interrupted"


SETTLE = """
import os, signal, sys, time
from threshold import interrupt
interrupt.install()
interrupt.SETTLE_S = float(sys.argv[1])
done = []
try:
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C to the process group...
    signal.pause()
except KeyboardInterrupt:
    try:  # ...the cleanup it starts (a trial told failed, enqueued again), and meanwhile
        os.kill(os.getpid(), signal.SIGTERM)  # find's SIGTERM to its workers
        time.sleep(0.3)
        done.append("cleaned up")
    except KeyboardInterrupt:
        done.append("cleanup cut")
print(done[0])
sys.exit(interrupt.exit_status())
"""


@pytest.mark.parametrize(("settle", "said"), [(10.0, "cleaned up"), (0.0, "cleanup cut")])
def test_a_second_signal_at_once_does_not_cut_the_cleanup_of_the_first(settle, said):
    """Issue 62: Ctrl-C to find's group, then find's SIGTERM to its workers, cut the worker's
    cleanup and left its trial RUNNING. A signal soon after the first is the same request;
    with no window (0 s) the second cuts the cleanup, as before."""
    proc = subprocess.run([sys.executable, "-c", SETTLE, str(settle)], capture_output=True,
                          text=True)  # fmt: skip
    assert proc.stdout.strip() == said, proc.stderr
    assert proc.returncode == 130  # the first signal's status


def test_a_deadline_cuts_the_block_in_flight_and_nothing_after_it():
    """cut_at raises Cut inside the block at its deadline (a loop that never ends on its own),
    takes no `except Exception`, sets no flag of a signal, and strikes no code after the block."""
    from threshold.interrupt import Cut, cut_at, interrupted

    caught = []
    with pytest.raises(Cut), cut_at(time.perf_counter() + 0.2):
        while True:
            try:
                sum(range(1000))
            except Exception as e:  # the work's own handlers do not take it
                caught.append(e)
    assert not caught and not interrupted(RuntimeError("after a cut"))
    with cut_at(time.perf_counter() + 0.2):
        pass
    with cut_at(None):
        time.sleep(0.3)  # past both deadlines: nothing raised here
