"""``-k EXPR``: a case selection by words of its id, with pytest's ``-k`` semantics.

Grammar (pytest's ``_pytest/mark/expression.py``, with wider words)::

    expression := expr EOF
    expr       := and_expr ('or' and_expr)*
    and_expr   := not_expr ('and' not_expr)*
    not_expr   := 'not' not_expr | '(' expr ')' | word
    word       := a run of characters other than whitespace, '(', ')', quotes
                | '"' any characters but '"' '"' | "'" any characters but "'" "'"

``and``, ``or`` and ``not`` are operators only as whole lower-case words. ``not`` binds tighter than ``and``,
``and`` tighter than ``or``. A word may hold ``=``, ``[``, ``]``, ``,``, ``-``, ``.`` and ``:`` (pytest's words
may not hold ``=`` or ``,``); quotes allow spaces and parentheses in a word.

A word matches a case when it is a substring of the case id, or of the case id with its ``=`` signs removed (the
spelling pytest's ``-k`` accepts: ``N1000`` for ``N=1000``), compared case-insensitively as pytest does. So
``-k "float16 and not N=1"`` keeps the float16 cases (and the bfloat16 ones: ``float16`` is a substring of
``bfloat16``; write ``[float16`` for float16 alone) whose id holds no ``N=1`` (which leaves out ``N=1000`` too;
write ``N=1-`` or ``N=1]`` for N=1 alone).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator

#: The characters that end a bare word.
_WORD = re.compile(r"""[^\s()'"]+""")


class KeywordError(ValueError):
    """A malformed expression: ``message`` at ``column`` (1-based) of ``text``."""

    def __init__(self, text: str, column: int, message: str):
        super().__init__(f"{message} at column {column}")
        self.text, self.column, self.message = text, column, message

    def lines(self, option: str = "-k") -> list[str]:
        """The error for a user: the message with its column, the expression, and a caret under the column."""
        head = f"{option} {self.text!r}: {self.message} at column {self.column}"
        return [head, f"  {self.text}", "  " + " " * (self.column - 1) + "^"]


@dataclasses.dataclass(frozen=True)
class _Token:
    kind: str  # "(", ")", "and", "or", "not", "word", "end"
    value: str
    pos: int  # 0-based


def _tokens(text: str) -> Iterator[_Token]:
    pos = 0
    while pos < len(text):
        ch = text[pos]
        if ch.isspace():
            pos += 1
        elif ch in "()":
            yield _Token(ch, ch, pos)
            pos += 1
        elif ch in "'\"":
            end = text.find(ch, pos + 1)
            if end == -1:
                raise KeywordError(text, pos + 1, f"closing quote {ch} is missing")
            yield _Token("word", text[pos + 1 : end], pos)
            pos = end + 1
        else:
            m = _WORD.match(text, pos)
            assert m is not None  # every other character starts a word
            word = m.group()
            yield _Token(word if word in ("and", "or", "not") else "word", word, pos)
            pos = m.end()
    yield _Token("end", "", len(text))


#: A compiled expression: given the matcher of one case's words, whether the case is selected.
Matcher = Callable[[Callable[[str], bool]], bool]


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = _tokens(text)
        self.current = next(self.tokens)

    def accept(self, kind: str) -> _Token | None:
        if self.current.kind != kind:
            return None
        token = self.current
        if kind != "end":
            self.current = next(self.tokens)
        return token

    def expect(self, kind: str, what: str) -> None:
        if self.accept(kind) is None:
            self.reject(what)

    def reject(self, what: str) -> None:
        got = "end of input" if self.current.kind == "end" else repr(self.current.value)
        raise KeywordError(self.text, self.current.pos + 1, f"expected {what}, got {got}")

    def expr(self) -> Matcher:
        terms = [self.and_expr()]
        while self.accept("or"):
            terms.append(self.and_expr())
        return terms[0] if len(terms) == 1 else (lambda match: any(t(match) for t in terms))

    def and_expr(self) -> Matcher:
        terms = [self.not_expr()]
        while self.accept("and"):
            terms.append(self.not_expr())
        return terms[0] if len(terms) == 1 else (lambda match: all(t(match) for t in terms))

    def not_expr(self) -> Matcher:
        if self.accept("not"):
            inner = self.not_expr()
            return lambda match: not inner(match)
        if self.accept("("):
            inner = self.expr()
            self.expect(")", "')'")
            return inner
        token = self.accept("word")
        if token is None:
            self.reject("a word, 'not' or '('")
        assert token is not None
        word = token.value
        return lambda match: match(word)


@dataclasses.dataclass(frozen=True)
class Keyword:
    """A parsed ``-k`` expression (:func:`parse`)."""

    text: str
    evaluate: Matcher

    def matches(self, case_id: str) -> bool:
        """Whether the expression selects ``case_id`` (see the module docstring for what a word matches)."""
        names = (case_id.lower(), case_id.replace("=", "").lower())
        return self.evaluate(lambda word: any(word.lower() in name for name in names))


def parse(text: str) -> Keyword:
    """``text`` parsed; a :class:`KeywordError` with the column of the first token that does not fit the grammar
    (an empty expression included: it would select nothing)."""
    parser = _Parser(text)
    if parser.current.kind == "end":
        raise KeywordError(text, 1, "expected a word, 'not' or '(', got end of input")
    evaluate = parser.expr()
    parser.expect("end", "'and', 'or' or the end")
    return Keyword(text, evaluate)
