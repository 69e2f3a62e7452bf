"""`pip install ./python` works offline (no index): the in-tree build
backend generates the stubs from proto/ and needs nothing downloaded; the
installed package imports from anywhere and holds the same API."""

import os
import shutil
import subprocess
import sys

import pytest

from cluster import SOURCE_DIR


def test_pip_install_offline(tmp_path):
    if shutil.which("protoc") is None or shutil.which(
            "grpc_python_plugin") is None:
        pytest.skip("protoc or grpc_python_plugin missing")
    venv = tmp_path / "venv"
    made = subprocess.run([sys.executable, "-m", "venv",
                           "--system-site-packages", str(venv)],
                          capture_output=True, text=True)
    if made.returncode != 0 or not (venv / "bin" / "pip").exists():
        pytest.skip(f"no venv with pip: {made.stderr[-200:]}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PIP_NO_INDEX"] = "1"  # Offline: nothing may be downloaded.
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    source = tmp_path / "python"
    # pip builds in place; a copy keeps the source tree clean (it must find
    # ../proto, so copy that too).
    shutil.copytree(os.path.join(SOURCE_DIR, "python"), source,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(os.path.join(SOURCE_DIR, "proto"), tmp_path / "proto")
    installed = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--no-index", str(source)],
        capture_output=True, text=True, env=env, timeout=240)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    check = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import paramserver as ps, paramserver.v1 as v1\n"
         "print(ps.__file__)\n"
         "print(ps.JobClient, v1.JobSpec.DESCRIPTOR.file.name)\n"
         "print(type(ps.v1.SeedRequest()).__module__)\n"],
        capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert check.returncode == 0, check.stderr
    lines = check.stdout.splitlines()
    assert lines[0].startswith(str(venv))
    assert "ps/v1/job.proto" in lines[1]
    assert lines[2] == "paramserver._proto.ps.v1.parameter_pb2"
    # The stubs are never written into the source tree.
    assert not (source / "paramserver" / "_proto").exists()
