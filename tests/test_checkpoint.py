import pytest
import torch

from threshold import CheckpointError
from threshold.model import ModelConfig, RecurrentTransformer
from threshold.tasks import TaskConfig
from threshold.train import TrainConfig
from threshold.train.checkpoint import load_checkpoint, save_checkpoint


@pytest.fixture
def saved(tmp_path):
    task = TaskConfig(ops=("max", "add"), n=7)
    torch.manual_seed(0)
    model = RecurrentTransformer(ModelConfig(len(task.vocab), task.max_len, 12, n_head=2))
    path = tmp_path / "run" / "model.ckpt"
    digest = save_checkpoint(path, model, task, TrainConfig(seed=5).to_dict(), {"accuracy": 0.5})
    return path, model, task, digest


def test_round_trip_rebuilds_the_same_model(saved):
    path, model, task, _ = saved
    ckpt = load_checkpoint(path)
    assert ckpt.task_config == task
    assert ckpt.model_config == model.cfg
    assert ckpt.vocab == task.vocab.tokens
    assert TrainConfig(**ckpt.train_config) == TrainConfig(seed=5)
    assert ckpt.metrics == {"accuracy": 0.5}
    rebuilt = ckpt.build_model()
    idx = torch.randint(0, len(task.vocab), (2, 9))
    model.eval()
    torch.testing.assert_close(rebuilt(idx), model(idx), rtol=0, atol=0)


def test_write_is_atomic_and_leaves_no_temporary_files(saved):
    path, *_ = saved
    assert [p.name for p in path.parent.iterdir()] == ["model.ckpt"]


@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_tampered_checkpoint_is_refused(saved, where):
    path, *_ = saved
    raw = bytearray(path.read_bytes())
    body_start = raw.index(b"\n") + 1
    pos = {"start": body_start, "middle": (body_start + len(raw)) // 2, "end": len(raw) - 1}[where]
    raw[pos] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="does not match its hash"):
        load_checkpoint(path)


def test_truncated_checkpoint_is_refused(saved):
    path, *_ = saved
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="does not match its hash"):
        load_checkpoint(path)


def test_other_files_are_refused(tmp_path):
    with pytest.raises(CheckpointError, match="cannot be read"):
        load_checkpoint(tmp_path / "missing.ckpt")
    other = tmp_path / "other.pt"
    torch.save({"a": 1}, other)
    with pytest.raises(CheckpointError, match="not a threshold checkpoint"):
        load_checkpoint(other)


def test_hash_is_of_the_content(saved, tmp_path):
    _, model, task, digest = saved
    again = save_checkpoint(
        tmp_path / "b.ckpt", model, task, TrainConfig(seed=5).to_dict(), {"accuracy": 0.5}
    )
    assert again == digest
    with torch.no_grad():
        model.head.weight[0, 0] += 1
    changed = save_checkpoint(
        tmp_path / "c.ckpt", model, task, TrainConfig(seed=5).to_dict(), {"accuracy": 0.5}
    )
    assert changed != digest
