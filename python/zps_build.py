"""A PEP 517 build backend for the zps Python package, standard library only.

The package is pure Python (libzps is loaded with ctypes at run time), so a
wheel is a zip of python/zps plus its metadata; writing it here keeps
`pip install python/` free of setuptools and of any download.
"""

import base64
import hashlib
import os
import re
import zipfile

_HERE = os.path.dirname(os.path.abspath(__file__))
_TAG = "py3-none-any"


def _project():
    text = open(os.path.join(_HERE, "pyproject.toml"), encoding="utf-8").read()
    name = re.search(r'^name = "([^"]+)"', text, re.M).group(1)
    version = re.search(r'^version = "([^"]+)"', text, re.M).group(1)
    summary = re.search(r'^description = "([^"]+)"', text, re.M).group(1)
    return name, version, summary


def _files():
    root = os.path.join(_HERE, "zps")
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                full = os.path.join(d, f)
                yield full, os.path.relpath(full, _HERE).replace(os.sep, "/")


def _record_line(arc, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arc, digest, len(data))


def _metadata():
    name, version, summary = _project()
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\n"
            "Requires-Python: >=3.8\nProvides-Extra: numpy\nProvides-Extra: torch\n"
            "Requires-Dist: numpy; extra == \"numpy\"\n"
            "Requires-Dist: torch>=1.13; extra == \"torch\"\n"
            "Requires-Dist: numpy; extra == \"torch\"\n" % (name, version, summary))


def _dist_info():
    name, version, _ = _project()
    return "%s-%s.dist-info" % (name, version)


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    d = os.path.join(metadata_directory, _dist_info())
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    return _dist_info()


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def _wheel(wheel_directory, entries):
    name, version, _ = _project()
    path = os.path.join(wheel_directory, "%s-%s-%s.whl" % (name, version, _TAG))
    info = _dist_info()
    record = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in entries:
            z.writestr(arc, data)
            record.append(_record_line(arc, data))
        for arc, data in ((info + "/METADATA", _metadata().encode()),
                          (info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: zps_build\n"
                                             "Root-Is-Purelib: true\nTag: %s\n" % _TAG)
                           .encode())):
            z.writestr(arc, data)
            record.append(_record_line(arc, data))
        record.append(info + "/RECORD,,")
        z.writestr(info + "/RECORD", "\n".join(record) + "\n")
    return os.path.basename(path)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, [(arc, open(full, "rb").read()) for full, arc in _files()])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # A .pth file that puts this folder on sys.path: edits take effect at once.
    return _wheel(wheel_directory, [("zps_editable.pth", (_HERE + "\n").encode())])
