import torch

from specd.core.scratch import Scratch


def test_rows_reuse_one_buffer_and_grow_to_the_largest_round():
    scratch = Scratch()
    a = scratch.rows((3, 5), torch.float32, torch.device("cpu"))
    b = scratch.rows((2, 5), torch.float32, torch.device("cpu"))
    assert a.shape == (3, 5) and b.shape == (2, 5)
    assert b.data_ptr() == a.data_ptr()  # a smaller round reuses the memory
    c = scratch.rows((4, 5), torch.float32, torch.device("cpu"))
    assert c.shape == (4, 5) and c.is_contiguous()
    d = scratch.rows((4, 5), torch.float64, torch.device("cpu"))
    assert d.dtype == torch.float64  # another dtype gets its own buffer
