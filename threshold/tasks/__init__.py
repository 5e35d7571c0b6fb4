"""Tasks: testbeds, vocabularies, expression generation and splits (numpy and stdlib only)."""

from threshold.tasks.generate import (
    TaskConfig,
    TaskData,
    build_task_data,
    default_cache_dir,
    load_task_data,
    op_nodes,
    parse_weights,
)
from threshold.tasks.ops import CustomOp, module_ops, register_op
from threshold.tasks.sequences import SequenceSet
from threshold.tasks.testbeds import TESTBEDS, Testbed, get_testbed
from threshold.tasks.vocab import Vocabulary

__all__ = [
    "TESTBEDS",
    "CustomOp",
    "SequenceSet",
    "TaskConfig",
    "TaskData",
    "Testbed",
    "Vocabulary",
    "build_task_data",
    "default_cache_dir",
    "get_testbed",
    "load_task_data",
    "module_ops",
    "op_nodes",
    "parse_weights",
    "register_op",
]
