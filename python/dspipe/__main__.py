# SPDX-License-Identifier: Apache-2.0
"""python -m dspipe: version, CUDA usability (and why not), oneTBB concurrency, build info (CUDA
archs, SIMD level, the versions of the libraries linked in: in a wheel, the bundled copies)."""
from __future__ import annotations

import sys

from . import _dspipe, build_info, cuda_status


def main() -> int:
    b = build_info()
    c = cuda_status()
    d = _dspipe.build_details()
    print(f"dspipe {b['version']} ({b['build_type']} build, Python {sys.version.split()[0]})")
    if c["usable"]:
        print(f"CUDA: usable, {c['devices']} device(s)")
    else:
        print(f"CUDA: not usable: {c['reason']}")
    print(f"oneTBB: default concurrency {b['tbb_default_concurrency']}, max concurrency "
          f"{b['tbb_max_concurrency']}; usable CPUs {b['usable_cpus']}")
    print(f"build options: cuda_compiled={'ON' if b['cuda_compiled'] else 'OFF'}")
    if d["cuda_archs"]:
        print(f"CUDA build: toolkit {d['cuda_toolkit']} (cudart static), kernels for "
              f"{' '.join(d['cuda_archs'])}")
    s = d["simd"]
    cpu = ", ".join(f"{k[4:].upper()} {'yes' if v else 'no'}" for k, v in s.items()
                    if k.startswith("cpu_"))
    print(f"SIMD: dspipe {'+'.join(s['dspipe_baseline']) or 'generic'} baseline, AVX2 PNG "
          f"unfilter at run time; this CPU: {cpu or 'n/a'}")
    print(f"SIMD: OpenCV {s['opencv']}")
    print(f"build: {'wheel' if d['wheel'] else 'source build'}, libstdc++ {d['libstdcxx']}, "
          f"glibc {d['glibc_built']} at build, {d['glibc_running']} here; {d['compiler']}")
    print("libraries:")
    for name, version in d["libraries"].items():
        print(f"  {name}: {version}")
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        print("torch: not installed (output='numpy' or 'dlpack')")
    else:
        print(f"torch: {torch.__version__}, torch.cuda.is_available()={torch.cuda.is_available()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
