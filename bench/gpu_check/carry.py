"""The GPU check's carry: Airflow, this project and what they need, as wheels, for a GPU machine with no network.

``build`` (here, with PyPI) resolves the project's wheel and its closure for the GPU machine's Python and platform
(default CPython 3.12, manylinux x86_64) and downloads every wheel into ``--dest`` (default
``~/.cache/airflow-distributed/gpu-carry``, outside the checkout): ``whl/`` what the GPU image lacks and the
project's own wheel, ``opt/`` what the image already has (``--image-packages``, a file of names, one a line,
default ``image-packages.txt`` here: the lent GPU machines' image, as their documentation lists it),
carried only for a machine whose version does not fit, ``MANIFEST.txt``. ``--skip`` names packages not carried at
all (default: ``grpcio uvloop``, large and never imported by a DAG run: the OTLP exporter, uvicorn's event loop).
``--deepspeed VERSION`` (default 0.19.8, ``""`` for none) adds DeepSpeed for the GPU check's check d: PyPI has its
releases as source only, so its wheel is built here (``pip wheel``, ``DS_BUILD_OPS=0``: no compiled ops, pure
Python, about 2 MiB), with its requirements that the image lacks; the image's own (torch among them) are not carried.

``install`` (there, no network) installs ``whl/`` into ``--target`` (no index, no dependency resolution), then each
``opt/`` wheel whose package the machine lacks or has at a version that some carried wheel's requirements refuse,
and says what is still unmet. Then ``PYTHONPATH=<target>`` and run ``run.py``::

    python bench/gpu_check/carry.py build                                 # here (make gpu-carry)
    python3 bench/gpu_check/carry.py install --carry .gpu-carry --target /tmp/site   # there
    PYTHONPATH=/tmp/site python3 bench/gpu_check/run.py
"""

from __future__ import annotations

import argparse
import email.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DEST = Path("~/.cache/airflow-distributed/gpu-carry").expanduser()
MANYLINUX = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
PROJECT = "airflow-distributed"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_metadata(path: Path) -> email.message.Message:
    with zipfile.ZipFile(path) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        return email.parser.Parser().parsestr(archive.read(name).decode("utf-8"))


def pip(*args: str, env: dict[str, str] | None = None) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args], check=True, env=env)


def deepspeed_wheel(version: str, folder: Path, image: set[str]) -> tuple[Path, list[str]]:
    """DeepSpeed ``version``'s wheel, built into ``folder`` without its compiled ops, and its requirements that the
    image lacks.

    Built by this interpreter without build isolation: DeepSpeed's setup imports torch, and an isolated build would
    download a whole torch for it. So this interpreter needs torch and setuptools (the project's ``.venv`` has both).
    """
    pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(folder), f"deepspeed=={version}",
        env=dict(os.environ, DS_BUILD_OPS="0"))
    [wheel] = folder.glob("deepspeed-*.whl")
    needed = [line for line in wheel_metadata(wheel).get_all("Requires-Dist") or [] if "extra ==" not in line]
    return wheel, [line for line in needed if canonical(re.split(r"[ ;<>=!~\[]", line, maxsplit=1)[0]) not in image]


def build(args: argparse.Namespace) -> int:
    dest: Path = args.dest
    lines = args.image_packages.read_text().splitlines() if args.image_packages else []
    image = {canonical(line.strip()) for line in lines if line.strip() and not line.startswith("#")}
    skip = {canonical(name) for name in args.skip.split()}
    target = ["--only-binary=:all:", "--implementation", "cp", "--python-version", args.python_version]
    for platform in MANYLINUX:
        target += ["--platform", platform]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        pip("wheel", "--no-deps", "-w", str(work / "project"), str(ROOT))
        [project] = (work / "project").glob("*.whl")
        constraints = ["-c", str(args.constraints)] if args.constraints else []
        extra: list[str] = []
        if args.deepspeed:
            deepspeed, extra = deepspeed_wheel(args.deepspeed, work / "deepspeed", image)
        pip("install", "--dry-run", "--ignore-installed", "--target", str(work / "never"), "--report",
            str(work / "report.json"), *target, *constraints, str(project), *extra)
        report = json.loads((work / "report.json").read_text())
        pins = [f"{item['metadata']['name']}=={item['metadata']['version']}" for item in report["install"]
                if canonical(item["metadata"]["name"]) not in skip | {PROJECT}]
        (work / "pins.txt").write_text("\n".join(pins) + "\n")
        pip("download", "--no-deps", "-d", str(work / "all"), *target, "-r", str(work / "pins.txt"))
        shutil.rmtree(dest, ignore_errors=True)
        (dest / "whl").mkdir(parents=True)
        (dest / "opt").mkdir()
        shutil.copy(project, dest / "whl")
        rows = [f"whl\t{PROJECT} (this checkout)\t{project.stat().st_size}"]
        if args.deepspeed:
            shutil.copy(deepspeed, dest / "whl")
            rows.append(f"whl\tdeepspeed=={args.deepspeed} (built here, DS_BUILD_OPS=0)\t{deepspeed.stat().st_size}")
        for wheel in sorted((work / "all").glob("*.whl")):
            meta = wheel_metadata(wheel)
            folder = "opt" if canonical(meta["Name"]) in image else "whl"
            shutil.copy(wheel, dest / folder)
            rows.append(f"{folder}\t{meta['Name']}=={meta['Version']}\t{wheel.stat().st_size}")
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    (dest / "MANIFEST.txt").write_text(f"# folder, package, bytes; project commit {commit.strip()} (plus changes "
                                       "not committed, if any)\n" + "\n".join(rows) + "\n")
    for folder in ("whl", "opt"):
        size = sum(p.stat().st_size for p in (dest / folder).glob("*.whl"))
        print(f"{dest / folder}: {len(list((dest / folder).glob('*.whl')))} wheels, {size / 2**20:.1f} MiB")
    return 0


def install(args: argparse.Namespace) -> int:
    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    carry: Path = args.carry
    wheels = {canonical(wheel_metadata(p)["Name"]): p for p in sorted((carry / "whl").glob("*.whl"))}
    optional = {canonical(wheel_metadata(p)["Name"]): p for p in sorted((carry / "opt").glob("*.whl"))}
    environment = {**default_environment(), "extra": ""}

    def installed(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    def unmet(chosen: dict[str, Path]) -> dict[str, list[str]]:
        """Requirements of the chosen wheels that neither they nor the machine satisfy, by package."""
        versions = {name: wheel_metadata(path)["Version"] for name, path in chosen.items()}
        problems: dict[str, list[str]] = {}
        for path in chosen.values():
            for line in wheel_metadata(path).get_all("Requires-Dist") or []:
                requirement = Requirement(line)
                if requirement.marker is not None and not requirement.marker.evaluate(environment):
                    continue
                name = canonical(requirement.name)
                have = versions.get(name) or installed(name)
                if have is None or not requirement.specifier.contains(have, prereleases=True):
                    problems.setdefault(name, []).append(f"{requirement} (for {path.name}; have {have})")
        return problems

    chosen = dict(wheels)
    while True:  # an optional wheel taken in brings requirements of its own
        taken = {name: optional[name] for name in unmet(chosen) if name in optional and name not in chosen}
        if not taken:
            break
        chosen.update(taken)
    for name in sorted(set(chosen) - set(wheels)):
        have = installed(name)
        print(f"carry: {name}: {f'the machine has {have}' if have else 'not on the machine'}, installing the carried "
              f"{optional[name].name}")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index",
                    "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(args.target),
                    *map(str, chosen.values())], check=True)
    left = unmet(chosen)
    for _, lines in sorted(left.items()):
        print(f"carry: unmet: {'; '.join(lines)}")
    print(f"carry: {len(chosen)} wheels installed in {args.target}; run with PYTHONPATH={args.target}"
          f"{os.pathsep}$PYTHONPATH")
    return 1 if left and args.strict else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("build", help="download the wheels (here, with PyPI)")
    make.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    make.add_argument("--image-packages", type=Path, default=Path(__file__).with_name("image-packages.txt"),
                      help="the GPU image's package names, one a line")
    make.add_argument("--constraints", type=Path, help="pip constraints pinning the versions tested here")
    make.add_argument("--python-version", default="3.12")
    make.add_argument("--skip", default="grpcio uvloop", help="packages not carried at all")
    make.add_argument("--deepspeed", default="0.19.8", help="DeepSpeed version to build and carry (\"\": none)")
    put = commands.add_parser("install", help="install the wheels (there, without a network)")
    put.add_argument("--carry", type=Path, default=DEFAULT_DEST)
    put.add_argument("--target", type=Path, default=Path("/tmp/site"))
    put.add_argument("--strict", action="store_true", help="exit 1 when a requirement is still unmet")
    args = parser.parse_args(argv)
    return build(args) if args.command == "build" else install(args)


if __name__ == "__main__":
    sys.exit(main())
