"""python -m dspipe: version, CUDA usability (and why not), oneTBB concurrency, build options."""
from __future__ import annotations

import sys

from . import build_info, cuda_status


def main() -> int:
    b = build_info()
    c = cuda_status()
    print(f"dspipe {b['version']} ({b['build_type']} build, Python {sys.version.split()[0]})")
    if c["usable"]:
        print(f"CUDA: usable, {c['devices']} device(s)")
    else:
        print(f"CUDA: not usable: {c['reason']}")
    print(f"oneTBB: default concurrency {b['tbb_default_concurrency']}, max concurrency "
          f"{b['tbb_max_concurrency']}; usable CPUs {b['usable_cpus']}")
    print(f"build options: cuda_compiled={'ON' if b['cuda_compiled'] else 'OFF'}")
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        print("torch: not installed (output='numpy' or 'dlpack')")
    else:
        print(f"torch: {torch.__version__}, torch.cuda.is_available()={torch.cuda.is_available()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
