"""The syntax of ``{{ ... }}`` expressions: a tokenizer and a recursive-descent parser.

:func:`parse_expression` reads one expression from its ``{{`` to its ``}}`` and returns
an AST of plain tuples ``(kind, *operands)``; ``expressions.py`` evaluates it. Faults
raise ExpressionError quoting the expression and the 1-based column (in the whole string).
Function names and arities are passed in, so unknown functions fail here, at parse time.

Grammar, lowest precedence first::

    expr     := or ["if" or "else" expr]
    or       := and ("or" and)*        and := not ("and" not)*      not := "not" not | compare
    compare  := sum (("==" | "!=" | "<" | "<=" | ">" | ">=" | "in" | "not in") sum)*
    sum      := product (("+" | "-") product)*     product := unary (("*" | "/" | "%") unary)*
    unary    := "-" unary | primary ("." name ["(" args ")"] | "[" expr "]")*
    primary  := number | string | true | false | null | input | $json | $run | $name
              | $('Node Name') [.item | .first() | .last()] .json
              | function "(" args ")" | "(" expr ")" | "[" args "]"

``x.f(a)`` is sugar for ``f(x, a)``. AST kinds: lit, input, run, var, node, item, list,
call, not, neg, in, bin (operator in operand 1, including and/or), cond.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .errors import ExpressionError

Node = tuple[Any, ...]  # (kind, *operands)
Token = tuple[str, Any, int]  # (kind, value, position in the whole string)
Arity = Mapping[str, tuple[int, int]]  # function name -> (min args, max args)

COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")
_LEVELS = (("or",), ("and",), ("not",), COMPARISONS, ("+", "-"), ("*", "/", "%"))
_MAX_DEPTH = 40  # nesting limit: keeps the recursive parser well inside Python's stack
_TOKEN = re.compile(
    r"""\s*(?:(?P<end>\}\})|(?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
    |(?P<num>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<var>\$(?:[A-Za-z_][A-Za-z0-9_]*)?)|(?P<op>==|!=|<=|>=|[()\[\],.+\-*/%<>]))""",
    re.X | re.S,
)
_ESCAPE = re.compile(r"\\(.)", re.S)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r"}


def fail(text: str, start: int, end: int, pos: int, message: str) -> ExpressionError:
    """An ExpressionError for ``text[start:end]`` with the fault at ``pos``."""
    snippet = text[start:end] if end - start <= 200 else text[start : start + 197] + "..."
    return ExpressionError(f"{message} at column {pos + 1} in expression {snippet!r}")


def _tokenize(text: str, opened: int) -> tuple[list[Token], int]:
    """Tokens of the expression whose ``{{`` is at ``opened``, and the index past ``}}``."""
    tokens: list[Token] = []
    i = opened + 2
    while (m := _TOKEN.match(text, i)) is not None:
        kind = m.lastgroup or ""
        raw, i = m.group(kind), m.end()
        value: Any = raw
        if kind == "end":
            tokens.append(("end", None, m.start(kind)))
            return tokens, i
        if kind == "str":
            value = _ESCAPE.sub(lambda e: _ESCAPES.get(e[1], e[1]), raw[1:-1])
        elif kind == "num":
            try:
                value = int(raw) if raw.isdigit() else float(raw)
            except ValueError:  # past Python's integer digit limit
                raise fail(text, opened, len(text), m.start(kind), "number too long") from None
        elif kind == "var":
            value = raw[1:]
        tokens.append((kind, value, m.start(kind)))
    pos = len(text) - len(text[i:].lstrip())
    if pos >= len(text):
        raise fail(text, opened, len(text), opened, "unterminated '{{' (no closing '}}')")
    ch = text[pos]
    hint = " (use == to compare)" if ch == "=" else ""
    message = "unterminated string" if ch in "'\"" else f"unexpected character {ch!r}{hint}"
    raise fail(text, opened, len(text), pos, message)


class _Parser:
    def __init__(self, text: str, tokens: list[Token], start: int, end: int, arity: Arity):
        self.text, self.tokens, self.start, self.end = text, tokens, start, end
        self.arity = arity
        self.i = self.depth = 0

    def error(self, message: str, token: Token | None = None) -> ExpressionError:
        pos = (token or self.tokens[self.i])[2]
        return fail(self.text, self.start, self.end, pos, message)

    def at(self, kind: str, value: Any = None, ahead: int = 0) -> bool:
        k, v, _ = self.tokens[min(self.i + ahead, len(self.tokens) - 1)]
        return k == kind and (value is None or v == value)

    def take(self, kind: str | None = None, value: Any = None, what: str = "") -> Token:
        """The next token; when ``kind`` is given it must match, else a syntax error."""
        if kind is not None and not self.at(kind, value):
            k, v, _ = self.tokens[self.i]
            found = "end of expression" if k == "end" else repr(v)
            raise self.error(f"expected {what or repr(value)} but found {found}")
        self.i += 1
        return self.tokens[self.i - 1]

    def parse(self) -> Node:
        if self.at("end"):
            raise self.error("empty expression")
        node = self.expr()
        self.take("end", what="end of expression")
        return node

    def expr(self) -> Node:
        node = self.binary(0)
        if not self.at("name", "if"):
            return node
        self.take()
        cond = self.binary(0)
        self.take("name", "else")
        return ("cond", node, cond, self.expr())

    def nested(self, build: Callable[[], Node]) -> Node:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise self.error("expression nested too deeply")
        node = build()
        self.depth -= 1
        return node

    def binary(self, level: int) -> Node:
        if level == len(_LEVELS):
            return self.unary()
        if level == 2:  # prefix "not"
            if self.at("name", "not"):
                self.take()
                return ("not", self.nested(lambda: self.binary(2)))
            return self.binary(3)
        node = self.binary(level + 1)
        while True:
            kind, value, _ = self.tokens[self.i]
            if level == 3 and self.at("name", "not") and self.at("name", "in", 1):
                self.i += 2
                node = ("not", ("in", node, self.binary(4)))
            elif level == 3 and self.at("name", "in"):
                self.take()
                node = ("in", node, self.binary(4))
            elif kind in ("op", "name") and value in _LEVELS[level]:
                self.take()
                node = ("bin", value, node, self.binary(level + 1))
            else:
                return node

    def unary(self) -> Node:
        if self.at("op", "-"):
            self.take()
            return ("neg", self.nested(self.unary))
        node = self.nested(self.primary)
        while self.at("op", ".") or self.at("op", "["):
            if self.take()[1] == "[":
                node = ("item", node, self.expr())
                self.take("op", "]")
                continue
            token = self.take("name", what="a member name after '.'")
            if self.at("op", "("):
                self.take()
                node = self.call(token, [node, *self.args(")")])
            else:
                node = ("item", node, ("lit", token[1]))
        return node

    def args(self, close: str) -> list[Node]:
        items: list[Node] = []
        while not self.at("op", close):
            items.append(self.expr())
            if not self.at("op", close):
                self.take("op", ",", what=f"',' or {close!r}")
        self.take()
        return items

    def call(self, token: Token, args: list[Node]) -> Node:
        name = token[1]
        if name not in self.arity:
            known = ", ".join(sorted(self.arity))
            raise self.error(f"unknown function {name!r} (known: {known})", token)
        low, high = self.arity[name]
        if not low <= len(args) <= high:
            raise self.error(f"{name}() takes {low}-{high} arguments, got {len(args)}", token)
        return ("call", name, args)

    def node_ref(self, token: Token) -> Node:
        self.take("op", "(", what="'(' after '$'")
        name = self.take("str", what="a quoted node name")[1]
        self.take("op", ")")
        if self.at("op", ".") and any(self.at("name", w, 1) for w in ("first", "last")):
            self.i += 2
            self.take("op", "(")
            self.take("op", ")")
        elif self.at("op", ".") and self.at("name", "item", 1):
            self.i += 2
        if not (self.at("op", ".") and self.at("name", "json", 1)):
            raise self.error(f"expected .item.json after $({name!r})", token)
        self.i += 2
        return ("node", name)

    def primary(self) -> Node:
        token = self.take()
        kind, value, _ = token
        if kind in ("num", "str"):
            return ("lit", value)
        if kind == "var":
            named = {"": None, "json": ("input",), "run": ("run",)}
            return (named[value] or self.node_ref(token)) if value in named else ("var", value)
        if kind == "name":
            if value in ("true", "false", "null"):
                return ("lit", {"true": True, "false": False, "null": None}[value])
            if value == "input":
                return ("input",)
            if self.at("op", "("):
                self.take()
                return self.call(token, self.args(")"))
            hint = f"use input.{value}, $json.{value} or $('Node').item.json.{value}"
            raise self.error(f"unknown name {value!r} ({hint})", token)
        if value == "(":
            node = self.expr()
            self.take("op", ")")
            return node
        if value == "[":
            return ("list", self.args("]"))
        found = "end of expression" if kind == "end" else repr(value)
        raise self.error(f"expected a value but found {found}", token)


def parse_expression(text: str, opened: int, arity: Arity) -> tuple[Node, int]:
    """Parse the expression whose ``{{`` is at ``text[opened]``: (AST, index past ``}}``)."""
    tokens, end = _tokenize(text, opened)
    try:
        return _Parser(text, tokens, opened, end, arity).parse(), end
    except RecursionError:  # a safety net: the depth limit should stop this first
        raise fail(text, opened, end, opened, "expression nested too deeply") from None


def walk(root: Node) -> Iterator[Node]:
    """Every AST node under ``root`` (iterative: long operator chains make deep trees)."""
    stack: list[Any] = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple) and item and isinstance(item[0], str):
            yield item
            stack.extend(item[1:])
        elif isinstance(item, list):
            stack.extend(item)
