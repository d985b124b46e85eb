"""Pack onnxruntime-genai's CUDA pair so that it can be carried to a lent GPU machine (docs/eps.md §6.1).

    python benchmarks/device_runtime.py [--dir .dev] [--chunk-mb 50] [--arch 90]

The device machine has no package registry and takes at most 64 MiB of working tree per call, while
onnxruntime-gpu's wheel is 256 MB (its CUDA provider library 284 MB unpacked, 218 MB of it GPU code
for six architectures). This keeps the GPU code of one architecture (the H200 is sm_90: the other
cubins' payloads are zeroed, their headers kept, so the driver still finds its own), drops the
TensorRT provider, adds onnxruntime-genai-cuda and gguf, and writes one xz tarball of a site folder
split into chunks `DIR/a/chunk.00`, `DIR/b/chunk.01`, ... (about 80 MB in two chunks for sm_90), plus
`DIR/sum`. `benchmarks/device_run.sh` on the machine stashes the chunks call by call and unpacks them.
DIR must be ignored by git (`.git/info/exclude`) and named in each call's `carry`.
"""

from __future__ import annotations

import argparse
import hashlib
import mmap
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEELS = ("onnxruntime-gpu==1.31.1", "onnxruntime-genai-cuda==0.18.0", "gguf")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
FATBIN_MAGIC = struct.pack("<I", 0xBA55ED50)


def keep_one_arch(library: Path, arch: int) -> int:
    """Zero the payload of every fatbin entry not built for `arch` (sm_XY as XY); returns the bytes zeroed.

    A fatbin is a 16-byte header (magic, version 1, header size 16, size) and entries, each a header
    (kind u16, version u16, header size u32, payload size u64, ..., arch u32 at offset 28) then its payload.
    """
    zeroed = 0
    with library.open("r+b") as handle, mmap.mmap(handle.fileno(), 0) as data:
        position = 0
        while (start := data.find(FATBIN_MAGIC, position)) >= 0:
            _, version, header_size, size = struct.unpack_from("<IHHQ", data, start)
            if version != 1 or header_size != 16:
                position = start + 4
                continue
            entry, end = start + header_size, start + header_size + size
            while entry < end:
                _, _, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
                if struct.unpack_from("<I", data, entry + 28)[0] != arch:
                    data[entry + entry_header : entry + entry_header + payload] = bytes(payload)
                    zeroed += payload
                entry += entry_header + payload
            position = end
    return zeroed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(".dev"))
    parser.add_argument("--chunk-mb", type=int, default=50)
    parser.add_argument("--arch", type=int, default=90)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        wheels, site = Path(scratch) / "wheels", Path(scratch) / "site"
        platform_args = [item for p in PLATFORMS for item in ("--platform", p)]
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--python-version", "3.12", "--implementation", "cp", *platform_args, "-d", str(wheels),
                        *WHEELS], check=True)  # fmt: skip
        for wheel in sorted(wheels.glob("*.whl")):
            zipfile.ZipFile(wheel).extractall(site)
        for path in site.rglob("*.so*"):
            path.chmod(0o755)
        (site / "onnxruntime/capi/libonnxruntime_providers_tensorrt.so").unlink(missing_ok=True)
        zeroed = keep_one_arch(site / "onnxruntime/capi/libonnxruntime_providers_cuda.so", args.arch)
        tarball = Path(scratch) / "site.tar.xz"
        subprocess.run(f"tar cf - -C {scratch} site | xz -9e -T2 > {tarball}", shell=True, check=True)
        shutil.rmtree(args.dir, ignore_errors=True)
        data = tarball.read_bytes()
        count = -(-len(data) // (args.chunk_mb * 1_000_000))
        size = -(-len(data) // count)  # equal chunks: no call carries a tiny tail alone
        for index in range(0, len(data), size):
            folder = args.dir / chr(ord("a") + index // size)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"chunk.{index // size:02d}").write_bytes(data[index : index + size])
        (args.dir / "sum").write_text(hashlib.sha256(data).hexdigest() + "\n")
    print(f"{len(data) / 1e6:.0f} MB in {count} chunks under {args.dir}, {zeroed / 1e6:.0f} MB of GPU code zeroed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
