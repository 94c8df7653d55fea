"""The house rules of the package layout, checked on the source: one way down, Hydra at the edge.

Rooms (sub-packages and top-level modules) import each other without cycles, so the data flow
of `sgh-train` reads straight down and no room reaches back up; inside a room, its modules
import each other without cycles too. Only `sgh.cli` knows Hydra, and nothing imports `sgh.cli`
or `sgh.pipeline` but the command line (and the lazy public API).
"""

import ast
import re
from collections import defaultdict
from pathlib import Path

from tests.helpers import modules_loaded_by

PACKAGE = Path(__file__).resolve().parents[1] / "sgh"


def _module(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(
        ".__init__")


def _imports():
    """(importing module, imported name) for every import in the package, lazy ones (inside a
    function) too: `from a.b import c` imports `a.b.c`, a module or a name in `a.b`."""
    for path in PACKAGE.rglob("*.py"):
        module = _module(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                yield module, name


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "sgh"


def _first_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the directed graph `edges` as the path around it, or None if it has none."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        for target in sorted(edges[node]):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target, path + [target])):
                return cycle
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node, [node])):
            return cycle
    return None


def test_rooms_import_each_other_without_cycles():
    edges = defaultdict(set)
    for source, target in _imports():
        if target.startswith("sgh") and _room(source) != _room(target) != "sgh":
            edges[_room(source)].add(_room(target))
    cycle = _first_cycle(edges)
    assert cycle is None, f"import cycle: {' -> '.join(cycle or [])}"


def test_modules_inside_each_room_import_each_other_without_cycles():
    # The room test above sees only imports between rooms. A lazy import is a dependency too:
    # a module that imports up into one that imports it is two concepts tangled (a format
    # reader that is also a dataset loader), and its modules can no longer be read bottom-up.
    modules = {_module(path) for path in PACKAGE.rglob("*.py")}
    edges = defaultdict(set)
    for source, target in _imports():
        while target and target not in modules:  # `a.b.name` -> the module `a.b`
            target = target.rpartition(".")[0]
        if target and target != source and _room(target) == _room(source) != "sgh":
            edges[source].add(target)
    cycle = _first_cycle(edges)
    assert cycle is None, f"import cycle inside a room: {' -> '.join(cycle or [])}"


def test_only_the_command_line_knows_hydra_and_nothing_reaches_back_up_to_it():
    for source, target in _imports():
        if target.split(".")[0] == "hydra":
            assert source.startswith("sgh.cli"), f"{source} imports {target}"
        if target.startswith(("sgh.cli", "sgh.pipeline")):
            assert source.startswith("sgh.cli"), f"{source} imports {target}"


def test_the_numpy_rooms_import_neither_the_config_stack_nor_tensorflow():
    # `from sgh import pack_bits` and the metrics are for numpy users: no omegaconf, Hydra or
    # TensorFlow behind them (seconds of imports, and heavy dependencies, for nothing).
    assert modules_loaded_by(
        "import sgh.search, sgh.scores, sgh.metrics, sgh.codes, sgh.data\n"
        "from sgh import pack_bits, mean_average_precision",
        ("omegaconf", "hydra", "tensorflow", "keras")) == []


def test_reading_data_loads_no_compiler():
    # Streaming a vector file chunk by chunk has a memory budget (tests/data/test_vector_files.py)
    # smaller than numba's and scipy's imports; only the scans that need them load them.
    assert modules_loaded_by("import sgh.data", ("numba", "llvmlite", "scipy")) == []


def test_the_package_keeps_its_rooms_and_no_module_outgrows_one_concept():
    # A module directly under sgh/ is one every room reads (config, errors, codes, ...);
    # anything else belongs in the room of its stage. 500 lines: past that, a module holds
    # two concepts (the kernels and their driver, the readers and the conversions).
    package = Path(__file__).resolve().parents[1] / "sgh"
    top_level = sorted(path.name for path in package.glob("*.py") if path.name != "__init__.py")
    assert len(top_level) <= 8, top_level
    lengths = {str(path.relative_to(package)): len(path.read_text().splitlines())
               for path in package.rglob("*.py")}
    assert not {name: n for name, n in lengths.items() if n > 500}

_REPOSITORY = Path(__file__).resolve().parents[1]


def test_the_checkouts_docs_link_only_to_what_the_wheel_ships():
    # The wheel ships docs/, examples/ and benchmarks/LOG.md (pyproject.toml): a link from the
    # docs to anything else of the checkout (its README, say) would be dead once installed.
    shipped = [_REPOSITORY / "docs", _REPOSITORY / "examples",
               _REPOSITORY / "benchmarks" / "LOG.md"]
    for page in (_REPOSITORY / "docs").rglob("*.md"):
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            path = target.partition("#")[0]
            if path and "://" not in path:
                resolved = (page.parent / path).resolve()
                assert any(resolved.is_relative_to(place) for place in shipped), (page, target)
