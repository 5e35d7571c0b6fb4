"""The entry of a worker process that :func:`threshold.search.find.start_workers` starts.

``python -m threshold.cli.worker_process '{"study_name": ..., "execution": {...}}'``: the study
(or ``"studies": [...]``, a suite's, trained together) and its
:class:`threshold.config.Execution` as one JSON object, so the search layer starts its
workers without going through the command line's parsing. It lives at
the top of the house because it wires the layers together: the worker writes its dashboard
notes with the report layer's templates. SIGTERM and
SIGINT become KeyboardInterrupt (a running trial is marked failed; :mod:`threshold.interrupt`),
the worker ends with the process that started it, and a refused setting is logged as one line
with exit status 2.
"""

from __future__ import annotations

import json
import logging
import sys

from threshold.allocator import keep_freed_memory
from threshold.config import Execution
from threshold.errors import ThresholdError
from threshold.interrupt import exit_status, install
from threshold.report.dashboard_note import NOTE_RENDER
from threshold.search.batch import pack_log
from threshold.search.find import die_with_parent
from threshold.search.objective_run import run_objective_worker
from threshold.search.shared import run_shared_worker
from threshold.search.worker import quiet_storage_log, run_worker
from threshold.train.graphs import write_capture_counts

__all__ = ["main"]

log = logging.getLogger("threshold.worker")


def main(argv: list[str]) -> int:
    install()
    keep_freed_memory()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s worker %(process)d %(message)s")

    die_with_parent()
    quiet_storage_log()
    write_capture_counts()  # counted from its start: a worker killed outright is still one
    try:
        job = json.loads(argv[0])
        execution = Execution(**job["execution"])
        if job.get("studies"):  # a suite's studies, trained together: say each call's packs
            pack_log.setLevel(logging.INFO)
            run_shared_worker(job["studies"], execution, notes=NOTE_RENDER)
        elif job.get("objective"):  # an objective's study: call it, train nothing ourselves
            url, beat = execution.storage_url, execution.heartbeat_s
            run_objective_worker(job["study_name"], url, heartbeat_s=beat)
        else:
            run_worker(job["study_name"], execution, notes=NOTE_RENDER)
    except ThresholdError as e:
        log.error("error: %s", e)
        return 2
    except KeyboardInterrupt:
        return exit_status()
    finally:
        write_capture_counts()  # for a lend's record: graphs captured, captures failed, at its end
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
