"""A PEP 517 build backend for floe-client using only the standard library.

pip builds a project in an isolated environment into which it installs the project's
`build-system.requires`; with setuptools that means fetching setuptools and wheel from an
index. This backend requires nothing, so `pip install clients/python` (or `pip install -e`)
works offline, with or without build isolation. It builds a pure-Python wheel of
`src/floe_client`, an editable wheel (a `.pth` file naming `src/`), and an sdist; the
metadata comes from `[project]` in pyproject.toml.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import zipfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "floe_client"
SDIST_PARTS = ("pyproject.toml", "README.md", "_build", "src", "examples", "tools")


def _project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _dist_name(project: dict) -> str:
    return project["name"].replace("-", "_")


def _metadata(project: dict) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project.get('description', '')}",
        f"Requires-Python: {project.get('requires-python', '>=3')}",
    ]
    if "license" in project:
        lines.append(f"License: {project['license'].get('text', '')}")
    for requirement in project.get("dependencies", []):
        lines.append(f"Requires-Dist: {requirement}")
    for extra, requirements in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        for requirement in requirements:
            lines.append(f'Requires-Dist: {requirement}; extra == "{extra}"')
    readme = ROOT / project.get("readme", "README.md")
    if readme.is_file():
        lines.append("Description-Content-Type: text/markdown")
        return "\n".join(lines) + "\n\n" + readme.read_text(encoding="utf-8")
    return "\n".join(lines) + "\n"


def _dist_info_files(project: dict) -> dict[str, bytes]:
    return {
        "METADATA": _metadata(project).encode(),
        "WHEEL": b"Wheel-Version: 1.0\nGenerator: floe_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        "top_level.txt": f"{PACKAGE}\n".encode(),
    }


def _package_files() -> dict[str, bytes]:
    files = {}
    base = ROOT / "src"
    for path in sorted((base / PACKAGE).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            files[path.relative_to(base).as_posix()] = path.read_bytes()
    return files


def _write_wheel(directory: str, files: dict[str, bytes]) -> str:
    project = _project()
    dist = _dist_name(project)
    info = f"{dist}-{project['version']}.dist-info"
    name = f"{dist}-{project['version']}-py3-none-any.whl"
    entries = dict(files)
    for file_name, data in _dist_info_files(project).items():
        entries[f"{info}/{file_name}"] = data
    record = []
    for path, data in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    entries[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED) as wheel:
        for path, data in entries.items():
            wheel.writestr(zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0)), data)
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    project = _project()
    info = f"{_dist_name(project)}-{project['version']}.dist-info"
    target = Path(metadata_directory) / info
    target.mkdir(parents=True, exist_ok=True)
    for file_name, data in _dist_info_files(project).items():
        (target / file_name).write_bytes(data)
    return info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _package_files())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel whose only module is a `.pth` file putting the checkout's `src/` on sys.path."""
    source = str((ROOT / "src").resolve())
    return _write_wheel(wheel_directory, {f"{PACKAGE}.pth": (source + "\n").encode()})


def build_sdist(sdist_directory, config_settings=None):
    project = _project()
    base = f"{_dist_name(project)}-{project['version']}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as sdist:
        for part in SDIST_PARTS:
            path = ROOT / part
            if path.exists():
                sdist.add(
                    path,
                    arcname=f"{base}/{part}",
                    filter=lambda info: None if "__pycache__" in info.name else info,
                )
        pkg_info = _metadata(project).encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(pkg_info)
        sdist.addfile(info, io.BytesIO(pkg_info))
    return name
