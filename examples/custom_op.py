"""Your own ListOps op: GCD mod n, and the second largest operand, beside the built-in ops.

An op is a function of its operands (a tuple of values in 0..n-1) and the modulus n that gives a
value in 0..n-1; ``rank`` places it among the built-in ops (max and min 0, med 1, prod 2, add,
nadd and sadd 3) for the default measured op of a mixture, the hardest. Registering tries the
function on sample operands first. Use the module from the command line or from Python by its
import path (the task stores it, so workers, reports and analyses import it again)::

    threshold data --tasks gcd --ops-module examples.custom_op --mod 10 --n 3
    threshold find --tasks max,gcd --ops-module examples.custom_op --mod 10

or run this file: it prints three sequences of each op and the measured op of their mixture.
"""

import math

from threshold.tasks import register_op


def gcd(xs, n):
    """The greatest common divisor of the operands (gcd(0, x) = x), below n as they are."""
    return math.gcd(*xs) % n


def second(xs, n):
    """The second largest operand (the largest where it appears twice)."""
    return sorted(xs)[-2]


register_op("gcd", gcd, rank=2)
register_op("second", second, rank=1)


if __name__ == "__main__":
    from threshold.tasks import TaskConfig, build_task_data

    task = TaskConfig(ops=("max", "second", "gcd"), ops_module="examples.custom_op", n_train=100)
    data = build_task_data(task)
    for op in task.ops:
        for i in range(3):
            print(task.vocab.decode(data.test[op][i]))
    print("measured by default:", task.measured_op)
