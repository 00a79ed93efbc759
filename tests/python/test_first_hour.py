"""A new user's first hour (issue 40), written as the user wrote it: each mistake gets a message
in the user's terms, naming the call that fixes it."""
from __future__ import annotations

import os

import pytest

import dspipe


def test_opening_a_source_folder_says_to_build_it_first(tmp_path):
    # Item 13: Loader("my_src_folder") on the folder of images the user meant to convert.
    src = tmp_path / "my_src_folder"
    dspipe.synth(src, count=4, size=(16, 16), seed=1, classes=2)
    with pytest.raises(ValueError) as e:
        dspipe.Loader(str(src), batch_size=2, device="cpu")
    msg = str(e.value)
    assert "this is a source folder" in msg, msg
    assert f'dspipe.build("{src}", OUT)' in msg, msg
    assert "neither an LMDB" not in msg, msg


def test_no_gpu_machine_says_no_driver_instead_of_insufficient_driver():
    # Item 17: a machine with no /proc/driver/nvidia, no /dev/nvidia* and no libcuda.
    st = dspipe.cuda_status()
    if st["usable"]:
        pytest.skip("a CUDA device is usable here")
    if not dspipe.build_info().get("cuda_compiled"):
        pytest.skip("built without CUDA")
    has_driver = (os.path.exists("/proc/driver/nvidia")
                  or any(n.startswith("nvidia") for n in os.listdir("/dev")))
    if has_driver:
        pytest.skip("this machine has an NVIDIA driver or device node")
    try:
        import ctypes
        ctypes.CDLL("libcuda.so.1")
        pytest.skip("libcuda.so.1 is installed")
    except OSError:
        pass
    assert st["reason"].startswith("no NVIDIA driver or device found"), st
    assert "insufficient" not in st["reason"], st
