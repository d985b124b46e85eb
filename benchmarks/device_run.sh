#!/usr/bin/env bash
# On the lent GPU machine (docs/eps.md §6.1): stash the chunks benchmarks/device_runtime.py made,
# call by call (each call carries one folder: .dev/a, then .dev/b, ...; the machine goes back 30 s
# after a call, so the calls follow at once), then unpack them once and run a command with the CUDA
# pair first on the path:
#   bash benchmarks/device_run.sh stash                       # one call per chunk folder
#   bash benchmarks/device_run.sh run bash benchmarks/device_check.sh /tmp/dc
# Progress lines go to $OUT/progress.txt, so a call stopped at its limit still says where it was.
set -u
dir=${DEV_DIR:-.dev}
progress() { echo "$(date +%T) $*" | tee -a "${OUT:-/tmp}/progress.txt"; }
mkdir -p /tmp/ck && cp "$dir"/[a-z]/chunk.* /tmp/ck/ 2>/dev/null
progress "chunks: $(ls /tmp/ck | tr '\n' ' ')"
[ "${1:-}" = stash ] && exit 0
shift
if [ ! -e /tmp/site/.unpacked ]; then
  echo "$(cat "$dir/sum")  -" > /tmp/ck.sum
  cat /tmp/ck/chunk.* | sha256sum -c /tmp/ck.sum || { progress "checksum differs: a chunk is missing"; exit 3; }
  timeout 120 bash -c 'cat /tmp/ck/chunk.* | xz -d | tar x -C /tmp' || { progress "unpack failed"; exit 4; }
  touch /tmp/site/.unpacked
fi
progress "unpacked"
# the CUDA libraries torch's wheels brought (libcudart.so.13, cuBLAS, cuDNN 9, cuRAND, cuFFT)
nvidia_libs=$(timeout 60 python3 -c "import glob, os, site; print(':'.join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r, 'nvidia', '**', 'lib*.so*'), recursive=True)})))")
export LD_LIBRARY_PATH=$nvidia_libs:${LD_LIBRARY_PATH:-} PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/bin && printf '#!/bin/sh\nexec python3 -m gqa_export "$@"\n' > /tmp/bin/gqa-export && chmod +x /tmp/bin/gqa-export
export PATH=/tmp/bin:$PATH
progress "$(timeout 60 python3 -c 'import onnxruntime as o, onnxruntime_genai as g; print(o.__version__, o.get_available_providers(), g.__version__, g.is_cuda_available())' 2>&1)"
"$@"
