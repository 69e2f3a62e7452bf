"""A PEP 517 build backend for `pip install ./python`, with no requirements
of its own, so that the package installs offline.

It builds a wheel of the `paramserver` package with its Protobuf and gRPC
stubs generated from the repository's proto/ (gen_stubs.py: protoc and
grpc_python_plugin from PATH), and an sdist holding the package, the protos
and this backend.
"""

import base64
import hashlib
import io
import os
import re
import sys
import tarfile
import tempfile
import zipfile

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import gen_stubs  # noqa: E402

_TAG = "py3-none-any"


def _project():
    """name, version, summary, requires_python, dependencies, extras from
    pyproject.toml."""
    with open(os.path.join(_HERE, "pyproject.toml"), "rb") as f:
        raw = f.read()
    try:
        import tomllib
        data = tomllib.loads(raw.decode())["project"]
        return data
    except ImportError:  # Python < 3.11: the few fields used, by pattern.
        text = raw.decode()
        section = text.split("[project]", 1)[1].split("\n[", 1)[0]

        def value(key):
            m = re.search(rf'^{key}\s*=\s*"([^"]*)"', section, re.M)
            return m.group(1) if m else ""
        deps = re.search(r"^dependencies\s*=\s*\[(.*?)\]", section, re.M | re.S)
        return {"name": value("name"), "version": value("version"),
                "description": value("description"),
                "requires-python": value("requires-python"),
                "dependencies": re.findall(r'"([^"]+)"', deps.group(1))
                if deps else []}


def _proto_dir():
    for candidate in (os.path.join(_HERE, "proto"),
                      os.path.join(_HERE, os.pardir, "proto")):
        if os.path.isfile(os.path.join(candidate, "ps", "v1", "job.proto")):
            return os.path.normpath(candidate)
    raise RuntimeError("paramserver: proto/ps/v1/*.proto not found next to "
                       "or above python/")


def _dist_info(project):
    name = project["name"]
    version = project["version"]
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
             f"Summary: {project.get('description', '')}"]
    if project.get("requires-python"):
        lines.append(f"Requires-Python: {project['requires-python']}")
    for dep in project.get("dependencies", []):
        lines.append(f"Requires-Dist: {dep}")
    for extra, deps in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        for dep in deps:
            lines.append(f'Requires-Dist: {dep}; extra == "{extra}"')
    metadata = "\n".join(lines) + "\n"
    wheel = ("Wheel-Version: 1.0\nGenerator: paramserver _build_backend\n"
             f"Root-Is-Purelib: true\nTag: {_TAG}\n")
    return f"{name}-{version}.dist-info", {
        "METADATA": metadata, "WHEEL": wheel, "top_level.txt": "paramserver\n"}


def _package_files(stub_root):
    files = {}
    for root in (_HERE, stub_root):
        base = os.path.join(root, "paramserver")
        for dirpath, _, names in os.walk(base):
            if "__pycache__" in dirpath:
                continue
            for n in names:
                if n.endswith(".py"):
                    path = os.path.join(dirpath, n)
                    files[os.path.relpath(path, root)] = path
    return files


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest())
    return f"{arcname},sha256={digest.rstrip(b'=').decode()},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    name, files = _dist_info(_project())
    os.makedirs(os.path.join(metadata_directory, name), exist_ok=True)
    for n, text in files.items():
        with open(os.path.join(metadata_directory, name, n), "w") as f:
            f.write(text)
    return name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    project = _project()
    dist_info, meta = _dist_info(project)
    wheel_name = (f"{project['name']}-{project['version']}-{_TAG}.whl")
    with tempfile.TemporaryDirectory() as tmp:
        gen_stubs.generate(_proto_dir(), tmp)
        records = []
        path = os.path.join(wheel_directory, wheel_name)
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as whl:
            for arcname, source in sorted(_package_files(tmp).items()):
                with open(source, "rb") as f:
                    data = f.read()
                arcname = arcname.replace(os.sep, "/")
                whl.writestr(arcname, data)
                records.append(_record_line(arcname, data))
            for n, text in meta.items():
                arcname = f"{dist_info}/{n}"
                whl.writestr(arcname, text)
                records.append(_record_line(arcname, text.encode()))
            records.append(f"{dist_info}/RECORD,,")
            whl.writestr(f"{dist_info}/RECORD", "\n".join(records) + "\n")
    return wheel_name


def build_sdist(sdist_directory, config_settings=None):
    project = _project()
    base = f"{project['name']}-{project['version']}"
    name = f"{base}.tar.gz"
    proto = _proto_dir()
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tar:
        for n in ("pyproject.toml", "README.md", "_build_backend.py",
                  "gen_stubs.py"):
            tar.add(os.path.join(_HERE, n), f"{base}/{n}")
        for arcname, source in sorted(_package_files(_HERE).items()):
            tar.add(source, f"{base}/{arcname}")
        for p in gen_stubs.PROTOS:
            tar.add(os.path.join(proto, p), f"{base}/proto/{p}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = _dist_info(project)[1]["METADATA"].encode()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return name
