"""Config YAML read with bounds, so that a bad file is refused in one line, at once.

PyYAML alone expands a document before anything can look at it: a 1.7 KB "billion laughs"
file (aliases of aliases, `&a [*b, *b, ...]`) became a structure that took a minute and all
memory to validate, 100,000 nested brackets ended in a RecursionError, a 50 MB file was read
whole, and a key given twice in a mapping silently lost its first value. Here:

  * a config file is at most MAX_FILE_BYTES (1 MiB) of UTF-8 text;
  * a document nests at most MAX_DEPTH (64) levels, and holds at most MAX_NODES (100,000)
    nodes with every alias expanded (counted on the node graph, before anything is built);
  * a key appears once in a mapping, at any depth (merge keys `<<: *base` still work);
  * a syntax error is one line (problem, line, column), not PyYAML's multi-line report.

    read_config_text(path)         the text of a config file, or ConfigError naming the file
    load_yaml(text, where)         the data of a YAML text; errors start with `where`

The same loader reads the YAML value of a `key=value` override, so an override cannot bomb.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from srpo.config.errors import ConfigError

MAX_FILE_BYTES = 1 << 20  # a config is a page of settings; 1 MiB leaves room for long prompts
MAX_DEPTH = 64  # nesting levels (the project's configs use fewer than 10)
MAX_NODES = 100_000  # nodes once every alias is expanded (the project's configs hold hundreds)

_MERGE_TAG = "tag:yaml.org,2002:merge"


class BoundedLoader(yaml.SafeLoader):
    """yaml.SafeLoader with the bounds of the module doc; `where` starts every message."""

    def __init__(self, stream: str, where: str) -> None:
        super().__init__(stream)
        self.where = where
        self._depth = 0
        self._paths: dict[int, str] = {}  # id(mapping node) -> its dotted key (for messages)

    def compose_node(self, parent: Any, index: Any) -> Any:
        """PyYAML composes recursively: stop at MAX_DEPTH, long before Python's recursion
        limit, and before the scanner reads further (events are pulled lazily)."""
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                line = self.peek_event().start_mark.line + 1
                raise ConfigError(f"{self.where}: nested deeper than {MAX_DEPTH} levels "
                                  f"(at line {line}); a config needs far fewer")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_document(self, node: Any) -> Any:
        """Measure the document as if every alias were expanded, before building anything."""
        _Extent(self.where, self._paths).measure(node, "", 1)
        return super().construct_document(node)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            self._refuse_duplicate_keys(node)
        return super().construct_mapping(node, deep=deep)

    def _refuse_duplicate_keys(self, node: yaml.MappingNode) -> None:
        """A key given twice: PyYAML keeps the last value without a word; here it is an error
        naming the key and both lines. Keys brought in by a merge (`<<: *base`) may be
        overridden: they are not this mapping's own entries."""
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: PyYAML's own error says so
                continue
            seen.setdefault(key, line)
            if first is not None:
                parent = self._paths.get(id(node), "")
                dotted = f"{parent}.{key}" if parent else str(key)
                raise ConfigError(f"{self.where}: duplicate key {dotted!r} at line {first} and "
                                  f"line {line}; a key may appear once in a mapping")


class _Extent:
    """Counts a node graph's nodes and levels as if every alias were expanded, each node once
    (memoized), so a bomb of a few hundred nodes is refused in microseconds."""

    def __init__(self, where: str, paths: dict[int, str]) -> None:
        self.where = where
        self.paths = paths
        self.memo: dict[int, tuple[int, int]] = {}  # id(node) -> (nodes, levels)
        self.active: set[int] = set()

    def measure(self, node: Any, path: str, depth: int) -> tuple[int, int]:
        key = id(node)
        if key in self.active:
            raise ConfigError(f"{self.where}: a recursive alias (an anchor used inside "
                              f"itself, at line {node.start_mark.line + 1}); a config is a tree")
        if key not in self.memo:
            self.active.add(key)
            self.memo[key] = self._children(node, path, depth)
            self.active.discard(key)
        nodes, levels = self.memo[key]
        if depth - 1 + levels > MAX_DEPTH:
            raise ConfigError(f"{self.where}: nested deeper than {MAX_DEPTH} levels with its "
                              f"aliases expanded (at line {node.start_mark.line + 1})")
        return nodes, levels

    def _children(self, node: Any, path: str, depth: int) -> tuple[int, int]:
        if isinstance(node, yaml.MappingNode):
            self.paths.setdefault(id(node), path)
            pairs = [(k, v, f"{path}.{k.value}" if path else str(k.value))
                     if isinstance(k, yaml.ScalarNode) else (k, v, path) for k, v in node.value]
            children = [(c, p) for k, v, p in pairs for c in (k, v)]
        elif isinstance(node, yaml.SequenceNode):
            children = [(c, f"{path}[{i}]") for i, c in enumerate(node.value)]
        else:
            return 1, 1
        nodes, levels = 1, 1
        for child, child_path in children:
            n, lv = self.measure(child, child_path, depth + 1)
            nodes, levels = nodes + n, max(levels, lv + 1)
            if nodes > MAX_NODES:
                raise ConfigError(
                    f"{self.where}: holds more than {MAX_NODES} values once its aliases (*name, "
                    f"each a copy of what its anchor holds) are expanded; a config holds far fewer")
        return nodes, levels


def _one_line(error: yaml.YAMLError) -> str:
    """PyYAML's report (problem, context, marks on several lines) as one line."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        text = f"{error.problem} (line {mark.line + 1}, column {mark.column + 1})"
        return f"{error.context}, {text}" if error.context else text
    return " ".join(str(error).split())


def load_yaml(text: str, where: str) -> Any:
    """The data of one YAML document, within the bounds; any problem is a ConfigError that
    starts with `where` (e.g. "config file 'c.yaml'", "override train.lr")."""
    loader = BoundedLoader(text, where)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as e:
        raise ConfigError(f"{where} is not valid YAML: {_one_line(e)}") from e
    finally:
        loader.dispose()


def read_config_text(path: Path) -> str:
    """The text of a config file: at most MAX_FILE_BYTES, UTF-8; else a ConfigError naming it.
    Only MAX_FILE_BYTES + 1 bytes are ever read, whatever the file's size."""
    with path.open("rb") as f:
        raw = f.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(f"config file {str(path)!r} is larger than 1 MiB ({MAX_FILE_BYTES} "
                          f"bytes), the most a config file may hold")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {str(path)!r} is not UTF-8 text (byte {e.start}: "
                          f"{raw[e.start:e.start + 1]!r}); save it as UTF-8") from e
