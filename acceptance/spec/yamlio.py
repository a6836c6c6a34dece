"""Reading a spec file: YAML 1.2 core scalars, duplicate keys rejected, problems with line and column."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from acceptance.spec.messages import describe
from acceptance.spec.model import SpecProblem


class _YamlLoader(yaml.SafeLoader):
    """Safe loader with YAML 1.2 core scalars and duplicate keys rejected."""

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
