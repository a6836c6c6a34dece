"""Wording shared by the verdict and every reporter: numbers, criteria and reasons in one style.

Pure functions on pieces of :mod:`acceptance.records`. The verdict writes its
reasons with them and every reporter (console, JUnit, HTML, sign-off, GitHub)
shows criteria with them, so a sentence exists once; each reporter escapes the
result for its own format.
"""

from __future__ import annotations

import math
import re

from acceptance.records import Criterion, CriterionWorst, MetricValue, WorstElement

# C0 and C1 control characters other than tab, newline and carriage return,
# lone surrogates (which cannot be encoded as UTF-8) and the two non-characters
# U+FFFE/U+FFFF: XML 1.0 forbids them and terminals interpret some of them.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


#: Bidirectional-text controls (and the line and paragraph separators): shown escaped, so nothing can reorder
#: what a log line or a report says.
_BIDI = re.compile("[\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
#: Either class: what :func:`visible_controls` escapes.
_EITHER = re.compile(_BIDI.pattern[:-1] + _CONTROL.pattern[1:])


def visible_controls(text: str) -> str:
    r"""Replace control characters and bidirectional-text controls with a visible escape (``"\x1b"`` becomes
    the four characters ``\x1b``, U+202E the six characters ``\u202e``).

    Tab, newline and carriage return are kept; callers that need one line use
    :func:`one_line`. Text that holds none (most: ``str.isprintable``, a C loop, is true for text without any
    control, format or separator character, or else one search of both classes at once) is returned as it is.
    """
    if text.isprintable() or _EITHER.search(text) is None:
        return text
    text = _BIDI.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return _CONTROL.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text
    )


#: Longest user-supplied text a console or CI log line carries; results.json keeps the whole text.
LOG_LIMIT = 2000


def safe(text: str, limit: int = LOG_LIMIT) -> str:
    """Text from the code under test made safe for a terminal or a CI log: one line, control characters, ANSI
    escapes and bidi marks escaped (``\\x1b``, ``\\u202e``), every ``::`` broken (``: :``) so that no GitHub
    workflow command can be forged, and cut at ``limit`` characters with a marker."""
    flat = " ".join(visible_controls(text).split())
    flat = flat.replace("::", ": :")
    if len(flat) > limit:
        flat = flat[:limit] + f"… [{len(flat) - limit} more characters in results.json]"
    return flat


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun`` in agreement: ``counted(1, "case")`` is ``"1 case"``, ``counted(2, "case")`` is
    ``"2 cases"``; ``plural`` names an irregular plural (``counted(2, "match", "matches")``)."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def one_line(text: str, limit: int | None = None) -> str:
    """Collapse all whitespace runs (newlines included) to one space; cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(visible_controls(text).split())
    if limit is not None and len(flat) > limit:
        return flat[: max(limit - 1, 0)] + "…"
    return flat


def fmt(x: float | None) -> str:
    """A number for people, the one style of every report and message.

    Integers as integers; otherwise 3 significant digits, plain between 1e-2
    and 1e4 (``0.0625``, ``33.3``) and a compact exponent elsewhere (``4.1e-3``,
    ``1.23e5``). ``None`` is an em dash; ``nan``/``inf`` are spelled out.
    """
    if x is None:
        return "—"
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, int):
        return str(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    if 1e-2 <= abs(x) < 1e4:
        return f"{float(f'{x:.3g}'):g}"  # 3 significant digits, never an exponent (6190, not 6.19e+03)
    mantissa, exponent = f"{x:.2e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def fmt_value(value: MetricValue | tuple[float, ...]) -> str:
    """A metric value: a number, or a tuple such as diff3 ``(m1, m2)`` written ``(a, b)``."""
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(fmt(v) for v in value) + ")"
    return fmt(value)


def params_text(params: dict) -> str:
    """Case symbols as ``M=128, K=4097`` (insertion order)."""
    return ", ".join(f"{k}={v}" for k, v in params.items())


def output_label(output: int, name: str | None = None) -> str:
    """How reports name an output: its name where the spec gives one (a gradient: ``grad[x]``), else
    ``output k``."""
    return name or f"output {output}"


def metric_name(criterion: Criterion) -> str:
    """The metric as reports name it: ``dual-delta max_hyb`` for a dual-delta gate, with ``[output i]``
    (``[grad[x]]`` for a named output) appended for outputs other than the first unnamed one."""
    name = f"dual-delta {criterion.metric}" if criterion.kind == "dual_delta" else criterion.metric
    if criterion.output == 0 and not criterion.output_name:
        return name
    return f"{name}[{output_label(criterion.output, criterion.output_name)}]"


_FAILED_OP = {"<=": ">", ">=": "<", "==": "!="}


def criterion_text(criterion: Criterion) -> str:
    """One criterion as a sentence, e.g. ``diff1 4.1e-3 > 3e-3 (float16 convolution default)``.

    The operator shown is the comparison when it passed and its negation when
    it failed; a dual-delta gate says ``non-inferior`` / ``inferior``. A
    failed diff4 rule and a failed NaN/Inf placement are said in words
    (``diff4 one-sided: p1=1, p2=0 over n=120 unequal points``, ``NaN
    placement differs from the baseline at 3 positions``), and so are the
    vacuity and determinism rules (``vacuous (--strict): ...``, ``impl is not
    deterministic: ...``). The verdict's reasons are these sentences.
    """
    if criterion.kind in ("vacuity", "determinism"):
        return one_line(_rule_text(criterion))
    name = metric_name(criterion)
    where = (
        f"[{output_label(criterion.output, criterion.output_name)}]"
        if criterion.output or criterion.output_name
        else ""
    )
    if criterion.passed is None:
        return one_line(f"{name} not evaluated" + (f": {criterion.note}" if criterion.note else ""))
    if criterion.passed is False and criterion.kind == "placement":
        kind = "NaN" if criterion.metric == "nan_mismatch" else "Inf"
        return one_line(f"{kind} placement{where} differs from the baseline at {fmt_value(criterion.value)} positions")
    if criterion.passed is False and criterion.kind == "invariant":
        return one_line(f"output invariant{where} broken, {criterion.note} ({criterion.source})")
    if criterion.passed is False and criterion.kind == "diff4" and isinstance(criterion.value, (list, tuple)):
        p1, p2, n = criterion.value
        text = f"diff4{where} ({fmt(p1)}, {fmt(p2)}, n={fmt(n)}): {criterion.note or 'failed'}"
        return one_line(text + (f" ({criterion.source})" if criterion.source else ""))
    value = fmt_value(criterion.value)
    if criterion.kind == "dual_delta":
        word = "non-inferior" if criterion.passed else "inferior"
        text = f"{name} median ratio {value} {word} (factor {fmt_value(criterion.threshold)})"
    elif criterion.comparison in _FAILED_OP:
        op = criterion.comparison if criterion.passed else _FAILED_OP[criterion.comparison]
        text = f"{name} {value} {op} {fmt_value(criterion.threshold)}"
    else:
        text = f"{name} {value} {'passes' if criterion.passed else 'fails'} the two-sided check"
    if criterion.source:
        text += f" ({criterion.source})"
    if criterion.note:
        text += f"; {criterion.note}"
    return one_line(text)


def _rule_text(criterion: Criterion) -> str:
    """The vacuity or determinism rule in words (see :func:`acceptance.decide.verdict.vacuity_criteria` and
    :func:`acceptance.decide.verdict.determinism_criteria`): its note holds what was measured."""
    note = criterion.note or ""
    if criterion.kind == "vacuity":
        return f"vacuous (--strict): {note}" if criterion.passed is False else f"vacuous: {note} ({criterion.source})"
    if criterion.passed is False:
        return (
            f"impl is not deterministic: {note}; {criterion.source} "
            "(spec `deterministic: false` allows run-to-run variation)"
        )
    if criterion.passed is None:
        return f"impl determinism not required: {note} ({criterion.source})"
    return f"impl deterministic: {note} ({criterion.source})"


def full(x: float | None) -> str:
    """A value at full precision (the shortest repr that round-trips)."""
    return "—" if x is None else repr(float(x))


#: A :class:`CriterionWorst` measure in words: what its error is.
_MEASURE_WORDS = {
    "abs": ("|e-b|", ""),
    "rel": ("|e-b|/|b|", ""),
    "abs_oracle": ("|e-o|", ""),
    "rel_oracle": ("|e-o|/|o|", ""),
    "ulp": ("|e-o|", " ulp"),
    "ulp_over": ("|e-o|", " ulp"),
    "hyb": ("|e-o|/(1+|o|)", ""),
}


def criterion_worst_text(metric: str, w: CriterionWorst) -> str:
    """The element that decided ``metric``, values at full precision: index, trial, impl, baseline, oracle, its
    error in the criterion's measure."""
    out = f" of output {w.output}" if w.output else ""
    what, unit = _MEASURE_WORDS[w.measure]
    oracle = f", oracle {full(w.oracle)}" if w.oracle is not None else ""
    return (
        f"worst element for {metric}{out} at {tuple(w.index)} (trial {w.trial}): impl {full(w.impl)}, "
        f"baseline {full(w.baseline)}{oracle}; {what} = {fmt(w.error)}{unit}"
    )


def worst_element_text(w: WorstElement) -> str:
    """The worst element in words, values at full precision: index, trial, impl, baseline, oracle, ULP distance."""
    out = f" of {output_label(w.output, w.output_name)}" if w.output or w.output_name else ""
    text = (
        f"worst element{out} at {tuple(w.index)} (trial {w.trial}): impl {full(w.evaluated)}, "
        f"baseline {full(w.baseline)}"
    )
    if w.oracle is not None:
        text += f", oracle {full(w.oracle)}; |e-o| = {fmt(w.oracle_error)}" + (
            f" = {fmt(w.ulp)} ulp" if w.ulp is not None else ""
        )
    else:
        text += f", |e-b| = {fmt(w.abs_error)}"
    return text


def seconds(s: float) -> str:
    """Seconds in the unit that reads best: s, ms or us, three significant digits."""
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"
