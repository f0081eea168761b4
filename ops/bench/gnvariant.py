"""What the scripts that derive a GN variant from a fetched GN share (gnquant/quantize.py,
gnquant/rowquant.py, ortopt/optimize.py): where the parent and the variant live, and installing
the variant so that a half-written or unexpected file is never loaded as one.

A variant is $REIGNPIPE_HOME/gn/<name><suffix>/ with model.onnx and the parent's tokenizer.json;
the Go side finds it by gn.name and gives it its own fingerprint from the file's bytes.
"""
import hashlib
import os
import shutil
import sys


def paths(name, suffix):
    """Returns (parent dir, variant dir) of GN name; the variant dir exists afterwards."""
    home = os.environ.get("REIGNPIPE_HOME", os.path.expanduser("~/.cache/reignpipe"))
    src = os.path.join(home, "gn", name)
    dst = os.path.join(home, "gn", name + suffix)
    os.makedirs(dst, exist_ok=True)
    return src, dst


def staging(dst):
    """The path a script writes its model to before install (same file system as the result)."""
    return os.path.join(dst, "model.onnx.tmp")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def install(src, dst, tool, expect=None):
    """Moves staging(dst) to dst/model.onnx beside a copy of the parent's tokenizer and returns
    its sha256. With expect, a file whose sha256 differs is removed and the script exits with an
    error instead: the pinned hash is what makes the variant reproducible, and an installed
    file with another hash would silently become a different cache space."""
    staged = staging(dst)
    got = sha256(staged)
    if expect and got != expect:
        os.remove(staged)
        sys.exit(f"{tool}: {os.path.basename(dst)}: output sha256 {got}, expected {expect} "
                 "(another onnx, onnxruntime or numpy version?): not installed")
    shutil.copyfile(os.path.join(src, "tokenizer.json"), os.path.join(dst, "tokenizer.json"))
    os.replace(staged, os.path.join(dst, "model.onnx"))
    return got
