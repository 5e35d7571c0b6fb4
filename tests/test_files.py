"""threshold.files.atomic_write: a file is written whole or not at all, with open()'s mode."""

import pytest

from threshold.files import atomic_write


def test_a_failed_write_leaves_the_previous_file_and_no_temporary_one(tmp_path):
    path = tmp_path / "deep" / "record.json"
    with atomic_write(path, text=True) as f:
        f.write("first")
    with pytest.raises(RuntimeError), atomic_write(path, text=True) as f:
        f.write("second, half")
        raise RuntimeError("killed mid-write")
    assert path.read_text() == "first"
    assert [p.name for p in path.parent.iterdir()] == ["record.json"]


def test_the_file_has_the_mode_open_gives_not_a_temporary_files(tmp_path):
    (tmp_path / "plain").write_bytes(b"x")
    with atomic_write(tmp_path / "atomic") as f:
        f.write(b"x")
    plain, atomic = ((tmp_path / n).stat().st_mode & 0o777 for n in ("plain", "atomic"))
    assert atomic == plain and atomic & 0o044  # readable by others under the usual umask
