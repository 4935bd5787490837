"""Compile kafkastate's sans-IO core with mypyc, in place -- a measurement, not a build step.

    python tools/build_mypyc.py            # compile the default module set
    python tools/build_mypyc.py --all      # every module of kafkastate/core that compiles
    python tools/build_mypyc.py FILE ...   # only these files (any of kafkastate's)
    python tools/build_mypyc.py --clean    # remove every compiled core module again

The compiled extension modules land next to their sources (``client.cpython-311-...so``
beside ``client.py``), where the import system prefers them, plus one shared library for the
whole group at the repository root (``<hash>__mypyc.cpython-311-...so``).  ``--clean``
removes both and mypyc's ``build/`` directory, so the checkout is pure Python again; the
hand-built ``_speedups`` extension is never touched.  Nothing here is wired into the install,
``./ks`` or CI (docs/simulation.md, "Compiled core (mypyc): a measurement").
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from mypyc.build import mypycify
from mypyc.irbuild import specialize
from setuptools import Distribution

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "kafkastate" / "core"

# What the simulator runs most (docs/simulation.md, "What dominates now"), what it imports
# on the way, and every subclass of client.py's ClientDriven (an interpreted class cannot
# derive from a compiled one: the transactional world's producer would fail).
DEFAULT = [
    "client.py",
    "producer/producer.py",
    "admin/machine.py",
    "connection.py",
    "metrics.py",
    "metadata.py",
    "deadlines.py",
    "states.py",
    "consumer/fetcher.py",
    "consumer/group.py",
    "consumer/fetch/*.py",
    "protocol/framing.py",
    "protocol/requests.py",
]

# Modules left pure under --all, each with the reason (the docs page has the detail).
EXCLUDED: dict[str, str] = {
    # Extension points: a native class cannot be subclassed by interpreted code ("TypeError:
    # interpreted classes cannot inherit from compiled"), and users' partitioners and
    # assignors -- kafkastate.partitioner, kafkastate.legacy, the simulator's planted
    # assignors -- subclass these.
    "producer/partitioner.py": "subclassed by interpreted partitioners",
    "consumer/assignors.py": "subclassed by interpreted assignors",
    # A native class cannot inherit from a class outside the compiled set ("Inheriting
    # from most builtin types is unimplemented"): exceptions deriving from
    # kafkastate.errors, str and int subclasses.
    "config.py": "Secret(str)",
    "oauth.py": "TokenEndpointUnavailable(KafkaConnectionError)",
    "admin/types.py": "OffsetTimestamp(int)",
    "producer/pending.py": "MetadataPendingError(KafkaError)",
    # Operation is a plain (native) class and its subclasses are attrs classes, which
    # mypyc leaves as Python classes: "Non-extension classes may not inherit from
    # extension classes".  Kept interpreted, its attrs subclasses compile.
    "admin/operations.py": "attrs subclasses of a native class",
    # Its attrs subclasses declare class constants (`name: ClassVar[str] = "..."`); in a
    # compiled module attrs takes them for fields with defaults ("ValueError: No mandatory
    # attributes allowed after an attribute with a default value").
    "admin/acls.py": "ClassVar constants in attrs classes",
    "admin/brokers.py": "ClassVar constants in attrs classes",
    "admin/quotas.py": "ClassVar constants in attrs classes",
    "admin/replicas.py": "ClassVar constants in attrs classes",
    "admin/transactions.py": "ClassVar constants in attrs classes",
    # The C accelerator's producer lanes (_speedups.setup_lanes) read and write these
    # classes' __slots__ by offset; a native class has no slot descriptors ("TypeError:
    # setup_lanes(): <class 'Accumulator'>._lanes is not a slot of its own").
    "producer/accumulator.py": "slots read by _speedups' producer lanes",
    "protocol/records.py": "RecordBatchBuilder's slots read by _speedups' producer lanes",
    # encoded_request_type() makes EncodedRequest's subclasses at run time with type(): a
    # native class cannot be subclassed so ("interpreted classes cannot inherit from
    # compiled", at the first Produce); moved out of framing.py for that.
    "protocol/encoded.py": "EncodedRequest subclassed at run time",
}

# The one extension module in the tree not made by this script.
KEEP = "_speedups"


def _expand(patterns: list[str]) -> list[Path]:
    files: list[Path] = []
    for pattern in patterns:
        for path in sorted(CORE.glob(pattern)):
            if path.suffix == ".py" and path not in files:
                files.append(path)
    return files


def _compiled() -> list[Path]:
    # the whole package, not only the core: a FILE argument may name any module
    package = ROOT / "kafkastate"
    found = [p for p in package.rglob("*.so") if not p.name.startswith(KEEP + ".")]
    found += list(package.rglob("*.pyd"))
    found += sorted(ROOT.glob("*__mypyc*.so"))
    return found


def clean() -> int:
    removed = _compiled()
    for path in removed:
        path.unlink()
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    print(f"removed {len(removed)} compiled module(s)")
    return 0


def _teach_mypyc_attrs_field() -> None:
    """Have mypyc treat ``attrs.field(...)`` / ``attrs.Factory(...)`` as it treats
    ``attr.ib(...)``: as untyped.

    mypyc knows only the old ``attr`` names.  An annotated class attribute whose value is
    ``attrs.field(default=30.0)`` (``request_timeout: float = attrs.field(...)``) is
    otherwise coerced to its annotation when the class body runs, and the import fails
    with "float object expected; got attr._make._CountingAttr".  The classes themselves
    stay ordinary Python classes either way: mypyc makes a class native only under no
    decorator or ``dataclasses`` / ``attr.s`` ones, not ``attrs.define`` / ``attrs.frozen``.
    """
    for name in ("attrs.field", "attrs.Factory"):
        key = (name, None)
        if key not in specialize.specializers:
            specialize.specialize_function(name)(specialize.translate_dataclasses_field_call)


def build(files: list[Path]) -> int:
    _teach_mypyc_attrs_field()

    clean()
    sources = [str(p.relative_to(ROOT)) for p in files]
    print(f"compiling {len(sources)} module(s):")
    for source in sources:
        print(f"  {source}")
    extensions = mypycify(sources, opt_level="3")
    # A bare Distribution: setuptools' setup() would read the project's pyproject.toml, and
    # this build is no part of the project's packaging.
    dist = Distribution({"name": "kafkastate-mypyc-spike", "ext_modules": extensions})
    dist.script_args = ["build_ext", "--inplace", "--parallel", "2"]
    dist.parse_command_line()
    dist.run_commands()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clean", action="store_true", help="remove the compiled modules")
    parser.add_argument("--all", action="store_true", help="compile all of kafkastate/core")
    parser.add_argument("files", nargs="*", help="core files to compile (default: a hot set)")
    args = parser.parse_args(argv)
    if args.clean:
        return clean()
    if args.files:
        files = [Path(f).resolve() for f in args.files]
    elif args.all:
        files = [p for p in _expand(["**/*.py"]) if p.relative_to(CORE).as_posix() not in EXCLUDED]
    else:
        files = _expand(DEFAULT)
    return build(files)


if __name__ == "__main__":
    sys.exit(main())
