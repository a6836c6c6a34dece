"""Reading a spec file: YAML 1.2 core scalars, duplicate keys rejected, problems with line and column, and hostile
input refused before it costs anything: a file over :data:`MAX_BYTES`, nesting deeper than :data:`MAX_DEPTH`, or
a document whose aliases expand to more than :data:`MAX_NODES` nodes (a "billion laughs" alias bomb)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from acceptance.spec.messages import describe
from acceptance.spec.model import SpecProblem

#: Largest spec file read, in bytes (the built-in library's largest is under 4 KiB).
MAX_BYTES = 1 << 20
#: Deepest nesting of mappings and sequences.
MAX_DEPTH = 64
#: Most nodes of the document with every alias expanded (an alias counts as the whole node it names).
MAX_NODES = 100_000


class _TooBig(yaml.YAMLError):
    """A document over one of the limits; ``mark`` is where."""

    def __init__(self, problem: str, mark: yaml.Mark | None):
        super().__init__(problem)
        self.problem, self.problem_mark, self.context = problem, mark, None


class _YamlLoader(yaml.SafeLoader):
    """Safe loader with YAML 1.2 core scalars, duplicate keys rejected, and the nesting depth and the expanded
    size of the document (aliases counted as the nodes they name) limited while it is composed."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0
        self._expanded: dict[int, int] = {}  # id(node) -> nodes it stands for, aliases expanded

    def fetch_flow_collection_start(self, TokenClass: type) -> None:  # noqa: N803 - PyYAML's name
        """A ``[`` or ``{`` deeper than :data:`MAX_DEPTH` is refused as it is scanned: the scanner reads up to
        1024 characters ahead for a possible key, in time growing with the depth, before the composer sees it."""
        if self.flow_level >= MAX_DEPTH:
            raise _TooBig(f"nested deeper than {MAX_DEPTH} levels", self.get_mark())
        super().fetch_flow_collection_start(TokenClass)

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _TooBig(f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        size = 1
        if isinstance(node, yaml.SequenceNode):
            size += sum(self._expanded.get(id(child), 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            size += sum(self._expanded.get(id(k), 1) + self._expanded.get(id(v), 1) for k, v in node.value)
        if size > MAX_NODES:
            raise _TooBig(f"more than {MAX_NODES} nodes with its aliases expanded (an alias bomb?)", node.start_mark)
        self._expanded[id(node)] = size
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            if key_node.value in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark, f"duplicate key {key_node.value!r}", key_node.start_mark
                )
            seen.add(key_node.value)
        return super().construct_mapping(node, deep)


_YamlLoader.yaml_implicit_resolvers = {}
for _tag, _regexp, _first in (
    ("null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    ("int", r"^[-+]?[0-9]+$", list("-+0123456789")),
    (
        "float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        list("-+0123456789."),
    ),
):
    _YamlLoader.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}", re.compile(_regexp), _first)
_YamlLoader.add_constructor("tag:yaml.org,2002:int", lambda loader, node: int(loader.construct_scalar(node)))


def read_yaml(path: Path) -> tuple[dict[object, object] | None, SpecProblem | None]:
    """The YAML document of ``path`` (a mapping), or ``None`` and the problem with line and column."""
    file = str(path)
    try:
        if path.stat().st_size > MAX_BYTES:
            return None, SpecProblem(file, "", f"the file is larger than {MAX_BYTES} bytes; refusing to read it")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return None, SpecProblem(file, "", f"cannot read the file: {reason}")
    try:
        data = yaml.load(text, Loader=_YamlLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what, context = getattr(exc, "problem", None) or str(exc), getattr(exc, "context", None)
        if context and not context.startswith("while"):
            what = f"{context}, {what}"
        return None, SpecProblem(file, where, f"YAML error: {what}")
    if not isinstance(data, dict):
        got = "an empty file" if data is None else describe(data)
        expected = "expected a mapping (name, category, impl, ...) at the top level"
        return None, SpecProblem(file, "", f"{expected}, got {got}")
    return data, None
