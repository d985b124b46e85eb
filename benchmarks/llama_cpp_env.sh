#!/usr/bin/env bash
# Make the llama-cpp-python venv the GGUF tests and benchmarks compare against (tests/llama_cpp.py):
#   benchmarks/llama_cpp_env.sh [DIR]     (default: ~/.cache/gqa-export-tests/llama-cpp)
# pip builds llama.cpp from source (about an hour on two cores; GGML_NATIVE=OFF so the build runs
# on any x86-64 machine). The sdist is also unpacked under DIR/src for llama.cpp's own converter.
set -euo pipefail
DIR="${1:-${GQA_EXPORT_TEST_CACHE:-$HOME/.cache/gqa-export-tests}/llama-cpp}"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
python3 -m venv "$DIR"
"$DIR/bin/pip" install -q --upgrade pip
mkdir -p "$DIR/src"
"$DIR/bin/pip" download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$DIR/src"
tar -xzf "$DIR/src/llama_cpp_python-$VERSION.tar.gz" -C "$DIR/src"
CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF" \
  nice "$DIR/bin/pip" install "$DIR/src/llama_cpp_python-$VERSION.tar.gz"
echo "llama-cpp-python $VERSION in $DIR"
