"""``threshold data``: example sequences exactly as the model sees them."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from threshold.cli.common import CacheDir, run_guarded, takes
from threshold.errors import ConfigError
from threshold.options import TASK
from threshold.tasks import TaskConfig, load_task_data


@takes(task=TASK)
def data(
    task: dict,
    n: Annotated[int, typer.Option("--n", help="Sequences to show (per op for val/test).")] = 20,
    split: Annotated[str, typer.Option(help="train, val or test.")] = "train",
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
    cache_dir: CacheDir = None,
) -> None:
    """Print example sequences exactly as the model sees them."""

    def body():
        if split not in ("train", "val", "test"):
            raise ConfigError(f"split {split!r} is not allowed: use train, val or test")
        if n < 0:
            raise ConfigError(f"--n {n} is not allowed: use 0 or more")
        task_cfg = TaskConfig.from_options(**task)
        data = load_task_data(task_cfg, cache_dir)
        vocab = task_cfg.vocab
        op_names = list(task_cfg.testbed_obj.ops)
        sets = {"train": data.train} if split == "train" else getattr(data, split)
        rows = []
        for seqs in sets.values():
            for i in range(min(n, len(seqs))):
                tokens = seqs[i]
                p = int(seqs.prompt_len[i])
                rows.append(
                    {
                        "text": vocab.decode(tokens),
                        "op": op_names[int(seqs.op[i])],
                        "prompt": vocab.decode(tokens[:p]),
                        "answer": vocab.tokens[int(seqs.answers[i])],
                    }
                )
        if as_json:
            typer.echo(json.dumps(rows))
        else:
            for row in rows:
                typer.echo(row["text"])

    run_guarded(body)
