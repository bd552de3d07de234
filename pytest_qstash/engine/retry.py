"""QStash retry policy: default backoff, ``Upstash-Retry-Delay`` expressions, ``Retry-After``.

Three sources decide how long the fake QStash waits before re-delivering a message whose
attempt failed, in this order:

1. server-directed timing in the failed response (``Retry-After``, ``X-RateLimit-Reset``,
   ``X-RateLimit-Reset-Requests``, ``X-RateLimit-Reset-Tokens``), if it parses and is at most
   one day away (:func:`parse_retry_after`);
2. the message's ``Upstash-Retry-Delay`` math expression (:class:`RetryDelayExpression`);
3. QStash's default exponential backoff (:func:`default_backoff_ms`).

Counting convention, the same as QStash's ``Upstash-Retried`` delivery header: ``retried`` is
the number of retries *already performed*. When the first attempt fails, ``retried`` is 0: the
expression sees ``retried = 0`` and the default backoff is asked for retry number ``n = 1``.

Why a whitelist evaluator: ``Upstash-Retry-Delay`` is text supplied by whoever publishes a
message. Handing it to ``eval`` (even with empty builtins) lets it reach ``__import__``,
attributes and dunders, or burn CPU with ``9 ** 9 ** 9``. Instead the text is parsed with
:mod:`ast` once, every node is checked against a small whitelist (numbers, ``retried``,
``+ - * /``, unary ``+ -`` and nine math functions) and compiled into plain Python closures,
so nothing derived from the user's text is ever compiled to a code object or executed.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import timezone
from email.utils import parsedate_to_datetime

from .durations import go_duration_ms

__all__ = [
    "BACKOFF_RATE",
    "DEFAULT_RETRIES",
    "DEFAULT_RETRY_DELAY",
    "MAX_BACKOFF_MS",
    "MAX_EXPRESSION_LENGTH",
    "RETRY_AFTER_HEADERS",
    "InvalidRetryDelay",
    "RetryDelayExpression",
    "default_backoff_ms",
    "delay_before_retry_ms",
    "parse_retry_after",
]

DEFAULT_RETRIES = 3
"""Retries after the first attempt when ``Upstash-Retries`` is absent (4 attempts in all)."""

MAX_BACKOFF_MS = 86_400_000
"""One day: the cap of the default backoff, of expression results and of ``Retry-After``."""

MAX_EXPRESSION_LENGTH = 1000
"""Longest ``Upstash-Retry-Delay`` text accepted, in characters."""

RETRY_AFTER_HEADERS: tuple[str, ...] = (
    "retry-after",
    "x-ratelimit-reset",
    "x-ratelimit-reset-requests",
    "x-ratelimit-reset-tokens",
)
"""Response headers that direct the next retry, lower-cased, in order of precedence."""

# Nesting limits. A genuine retry delay is a one-liner; these only stop hostile or broken input
# long before Python's parser or our recursive compiler could hit the interpreter's stack limit.
_MAX_PAREN_DEPTH = 50
_MAX_NODE_DEPTH = 100

#: The default backoff waits ``e^(BACKOFF_RATE * n)`` seconds before retry ``n``, up to a day.
BACKOFF_RATE = 2.5

# Upper end of the default backoff: e^(2.5 n) s reaches one day (86 400 s) at n = 5. Comparing n
# against this integer first means an absurd n never reaches math.exp (which would overflow).
_FIRST_CAPPED_RETRY = math.ceil(math.log(MAX_BACKOFF_MS / 1000) / BACKOFF_RATE)

_ACCEPTED = "Accepted: numbers, retried, + - * / ( ), pow exp sqrt abs floor ceil round min max"

# The literal forms a header value can sensibly contain. Python also accepts 0x10, 1_000, 1j;
# those are refused so that an expression accepted here would also be accepted by QStash.
_NUMBER_LITERAL = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


class InvalidRetryDelay(ValueError):
    """An ``Upstash-Retry-Delay`` expression that cannot be parsed, or failed to evaluate.

    ``expression`` is the original text and ``reason`` says what is wrong; ``str(error)`` is a
    complete message suitable for a 400 response body.
    """

    def __init__(self, expression: str, reason: str, *, show_accepted: bool = True) -> None:
        self.expression = expression
        self.reason = reason
        message = f"invalid Upstash-Retry-Delay {_quote(expression)}: {reason}"
        if show_accepted:
            message += f". {_ACCEPTED}"
        super().__init__(message)


def _quote(text: str) -> str:
    # Error messages must stay readable even for a 100 000-character header value.
    if len(text) > 80:
        text = text[:77] + "..."
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _round_half_up(value: float) -> int:
    """Round a non-negative float to the nearest integer, halves upwards (not banker's)."""
    return math.floor(value + 0.5)


# ------------------------------------------------------------------------------------------
# Default backoff
# ------------------------------------------------------------------------------------------


def default_backoff_ms(n: int) -> int:
    """QStash's default delay before retry number ``n`` (1 = first retry), in milliseconds.

    ``min(86400, e^(2.5 n))`` seconds, converted to milliseconds and rounded to the nearest
    millisecond (halves upwards): 12 182 ms, 148 413 ms (2 m 28 s), 1 808 042 ms (30 m 8 s),
    22 026 466 ms (6 h 7 m 6 s), then :data:`MAX_BACKOFF_MS` for every ``n >= 5``.
    """
    if n < 1:
        raise ValueError(f"retry number n must be >= 1 (1 = first retry), got {n}")
    if n >= _FIRST_CAPPED_RETRY:
        return MAX_BACKOFF_MS
    return min(MAX_BACKOFF_MS, _round_half_up(math.exp(BACKOFF_RATE * n) * 1000))


#: ``default_backoff_ms`` in the ``Upstash-Retry-Delay`` language, where ``retried`` counts
#: from 0 (retry ``n`` is ``retried + 1``): what a step without a retry delay of its own shows
#: as its ``retryDelay``. Written from the constants above; a test evaluates it against
#: ``default_backoff_ms``.
DEFAULT_RETRY_DELAY = f"min({MAX_BACKOFF_MS}, exp({BACKOFF_RATE} * (retried + 1)) * 1000)"


# ------------------------------------------------------------------------------------------
# Upstash-Retry-Delay expressions
# ------------------------------------------------------------------------------------------

# A compiled expression node: takes ``retried`` (as a float), returns a finite float.
_Evaluator = Callable[[float], float]


class _EvaluationError(Exception):
    """Raised inside a compiled expression; turned into InvalidRetryDelay by delay_ms."""


class _CompileError(Exception):
    """A whitelist violation; RetryDelayExpression turns it into InvalidRetryDelay."""


def _finite(value: float, what: str) -> float:
    # Checked at every node, so an intermediate inf cannot be hidden by a later min().
    if not math.isfinite(value):
        raise _EvaluationError(f"{what} is not a finite number")
    return value


def _fn_pow(x: float, y: float) -> float:
    try:
        return math.pow(x, y)
    except OverflowError:
        raise _EvaluationError(f"pow({x:g}, {y:g}) is too large") from None
    except ValueError:
        raise _EvaluationError(f"pow({x:g}, {y:g}) is undefined") from None


def _fn_exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        raise _EvaluationError(f"exp({x:g}) is too large") from None


def _fn_sqrt(x: float) -> float:
    if x < 0:
        raise _EvaluationError(f"sqrt of a negative number ({x:g})")
    return math.sqrt(x)


def _fn_abs(x: float) -> float:
    return abs(x)


def _fn_floor(x: float) -> float:
    return float(math.floor(x))


def _fn_ceil(x: float) -> float:
    return float(math.ceil(x))


def _fn_round(x: float) -> float:
    # Halves away from zero, as in most expression languages; Python's round() would give
    # round(2.5) == 2 (banker's rounding), which nobody writing a header expects.
    return math.copysign(math.floor(abs(x) + 0.5), x)


def _fn_min(*args: float) -> float:
    return min(args)


def _fn_max(*args: float) -> float:
    return max(args)


# name -> (implementation, minimum arity, maximum arity or None for "any", usage hint)
_FUNCTIONS: dict[str, tuple[Callable[..., float], int, int | None, str]] = {
    "pow": (_fn_pow, 2, 2, "pow(x, y)"),
    "exp": (_fn_exp, 1, 1, "exp(x)"),
    "sqrt": (_fn_sqrt, 1, 1, "sqrt(x)"),
    "abs": (_fn_abs, 1, 1, "abs(x)"),
    "floor": (_fn_floor, 1, 1, "floor(x)"),
    "ceil": (_fn_ceil, 1, 1, "ceil(x)"),
    "round": (_fn_round, 1, 1, "round(x)"),
    "min": (_fn_min, 1, None, "min(x, y, ...)"),
    "max": (_fn_max, 1, None, "max(x, y, ...)"),
}

_VARIABLE = "retried"

# Why each refused binary operator is refused, with a hint where there is an equivalent.
_REFUSED_BINARY_OPERATORS: dict[type[ast.operator], str] = {
    ast.Pow: "operator ** is not supported; use pow(x, y)",
    ast.BitXor: "operator ^ is not supported (pow is written pow(x, y))",
    ast.Mod: "operator % is not supported",
    ast.FloorDiv: "operator // is not supported; use floor(x / y)",
    ast.MatMult: "operator @ is not supported",
    ast.LShift: "operator << is not supported",
    ast.RShift: "operator >> is not supported",
    ast.BitOr: "operator | is not supported",
    ast.BitAnd: "operator & is not supported",
}

# Readable names for the Python syntax people are most likely to try.
_REFUSED_NODES: dict[type[ast.AST], str] = {
    ast.Attribute: "attribute access is not supported",
    ast.Subscript: "indexing (subscripts) is not supported",
    ast.Lambda: "lambda is not supported",
    ast.List: "lists are not supported",
    ast.Tuple: "tuples are not supported (a comma may only separate function arguments)",
    ast.Dict: "dicts are not supported",
    ast.Set: "sets are not supported",
    ast.ListComp: "comprehensions are not supported",
    ast.SetComp: "comprehensions are not supported",
    ast.DictComp: "comprehensions are not supported",
    ast.GeneratorExp: "comprehensions are not supported",
    ast.Compare: "comparisons are not supported",
    ast.BoolOp: "and/or are not supported",
    ast.IfExp: "conditional expressions are not supported",
    ast.JoinedStr: "strings are not supported",
    ast.NamedExpr: "assignment (:=) is not supported",
    ast.Starred: "* unpacking is not supported",
    ast.Await: "await is not supported",
    ast.Yield: "yield is not supported",
    ast.YieldFrom: "yield is not supported",
    ast.Slice: "slices are not supported",
}


class _Compiler:
    """Checks a parsed expression against the whitelist and builds closures for it."""

    def __init__(self, source: str) -> None:
        self._source = source  # the stripped text that was parsed, for literal positions

    def compile(self, node: ast.AST, depth: int = 0) -> _Evaluator:
        if depth > _MAX_NODE_DEPTH:
            raise _CompileError(
                f"expression is too complex (nested more than {_MAX_NODE_DEPTH} levels deep)"
            )
        if isinstance(node, ast.Constant):
            return self._constant(node)
        if isinstance(node, ast.Name):
            return self._name(node)
        if isinstance(node, ast.UnaryOp):
            return self._unary(node, depth)
        if isinstance(node, ast.BinOp):
            return self._binary(node, depth)
        if isinstance(node, ast.Call):
            return self._call(node, depth)
        reason = _REFUSED_NODES.get(type(node))
        if reason is None:
            reason = f"Python syntax {type(node).__name__} is not supported"
        raise _CompileError(reason)

    def _constant(self, node: ast.Constant) -> _Evaluator:
        value = node.value
        segment = ast.get_source_segment(self._source, node) or repr(value)
        if isinstance(value, (str, bytes)):
            raise _CompileError("strings are not supported")
        # bool before int: True is an int to Python but not a number to anyone else.
        if isinstance(value, bool) or not isinstance(value, (int, float, complex)):
            raise _CompileError(f"{segment} is not supported")
        if isinstance(value, complex) or not _NUMBER_LITERAL.fullmatch(segment):
            raise _CompileError(
                f"number {segment} is not supported; write plain decimal numbers like 1000 or 1.5"
            )
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise _CompileError(f"number {_clip(segment)} is too large")
        return lambda retried: number

    def _name(self, node: ast.Name) -> _Evaluator:
        if node.id != _VARIABLE:
            if node.id in _FUNCTIONS:
                raise _CompileError(f"{node.id} is a function; call it as {_FUNCTIONS[node.id][3]}")
            raise _CompileError(f'unknown name "{node.id}"; the only variable is retried')
        return lambda retried: retried

    def _unary(self, node: ast.UnaryOp, depth: int) -> _Evaluator:
        operand = self.compile(node.operand, depth + 1)
        if isinstance(node.op, ast.USub):
            return lambda retried: -operand(retried)
        if isinstance(node.op, ast.UAdd):
            return operand
        symbol = "not" if isinstance(node.op, ast.Not) else "~"
        raise _CompileError(f"operator {symbol} is not supported")

    def _binary(self, node: ast.BinOp, depth: int) -> _Evaluator:
        refused = _REFUSED_BINARY_OPERATORS.get(type(node.op))
        if refused is not None:
            raise _CompileError(refused)
        left = self.compile(node.left, depth + 1)
        right = self.compile(node.right, depth + 1)
        if isinstance(node.op, ast.Add):
            return lambda retried: _finite(left(retried) + right(retried), "a sum")
        if isinstance(node.op, ast.Sub):
            return lambda retried: _finite(left(retried) - right(retried), "a difference")
        if isinstance(node.op, ast.Mult):
            return lambda retried: _finite(left(retried) * right(retried), "a product")
        if isinstance(node.op, ast.Div):
            return lambda retried: _divide(left(retried), right(retried))
        raise _CompileError(f"operator {type(node.op).__name__} is not supported")

    def _call(self, node: ast.Call, depth: int) -> _Evaluator:
        if not isinstance(node.func, ast.Name):
            if isinstance(node.func, ast.Attribute):
                raise _CompileError("attribute access is not supported")
            raise _CompileError("only the listed functions can be called, by name")
        name = node.func.id
        if name == _VARIABLE:
            raise _CompileError("retried is a variable, not a function")
        spec = _FUNCTIONS.get(name)
        if spec is None:
            raise _CompileError(f'unknown function "{name}"')
        function, min_args, max_args, usage = spec
        if node.keywords:
            raise _CompileError(f"keyword arguments are not supported; call {usage}")
        if any(isinstance(arg, ast.Starred) for arg in node.args):
            raise _CompileError("* unpacking is not supported")
        count = len(node.args)
        if count < min_args or (max_args is not None and count > max_args):
            raise _CompileError(f"{name}() got {count} argument(s); call {usage}")
        args: Sequence[_Evaluator] = tuple(self.compile(arg, depth + 1) for arg in node.args)
        what = f"{name}()"

        def call(retried: float) -> float:
            return _finite(function(*(arg(retried) for arg in args)), what)

        return call


def _clip(text: str, limit: int = 30) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _divide(x: float, y: float) -> float:
    if y == 0:
        raise _EvaluationError("division by zero")
    return _finite(x / y, "a quotient")


def _max_paren_depth(text: str) -> int:
    depth = deepest = 0
    for char in text:
        if char == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif char == ")":
            depth -= 1
    return deepest


class RetryDelayExpression:
    """A parsed ``Upstash-Retry-Delay`` expression; evaluate it with :meth:`delay_ms`.

    Parsing happens once, in the constructor (or :meth:`parse`), and raises
    :class:`InvalidRetryDelay` for anything outside the whitelist. :attr:`text` keeps the
    original header value verbatim, which is what QStash stores and returns as
    ``retryDelayExpression``.
    """

    __slots__ = ("_evaluate", "_text")

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            raise TypeError(f"Upstash-Retry-Delay must be a str, not {type(text).__name__}")
        self._text = text
        self._evaluate = _compile_expression(text)

    @property
    def text(self) -> str:
        """The expression exactly as given (not stripped or normalised)."""
        return self._text

    def __reduce__(self) -> tuple[type[RetryDelayExpression], tuple[str]]:
        # Kept as its text: the compiled form is closures, which pickle cannot write.
        return (RetryDelayExpression, (self._text,))

    def delay_ms(self, retried: int) -> int:
        """Milliseconds to wait before the next retry, ``retried`` retries having been done.

        ``retried`` is 0 when the first attempt has just failed. A negative result means
        "retry now" (0); results above one day are clamped to :data:`MAX_BACKOFF_MS`; the
        value is rounded to the nearest millisecond (halves upwards). Division by zero,
        overflow, ``sqrt`` of a negative number and similar raise :class:`InvalidRetryDelay`.
        """
        if retried < 0:
            raise ValueError(f"retried must be >= 0, got {retried}")
        try:
            value = self._evaluate(float(retried))
        except _EvaluationError as error:
            raise InvalidRetryDelay(
                self._text, f"{error} (when retried={retried})", show_accepted=False
            ) from None
        except (OverflowError, ValueError, ZeroDivisionError) as error:
            # Defensive: every known path raises _EvaluationError, but a math error must never
            # escape as anything other than InvalidRetryDelay.
            raise InvalidRetryDelay(
                self._text, f"{error} (when retried={retried})", show_accepted=False
            ) from None
        if value <= 0:
            return 0
        if value >= MAX_BACKOFF_MS:
            return MAX_BACKOFF_MS
        return _round_half_up(value)

    def __repr__(self) -> str:
        return f"RetryDelayExpression({self._text!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RetryDelayExpression):
            return NotImplemented
        return self._text == other._text

    def __hash__(self) -> int:
        return hash(self._text)


def _compile_expression(text: str) -> _Evaluator:
    def invalid(reason: str) -> InvalidRetryDelay:
        return InvalidRetryDelay(text, reason)

    # Cheap checks first, so hostile input never reaches the parser.
    source = text.strip()
    if not source:
        raise invalid("the expression is empty")
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise invalid(f"too long ({len(text)} characters; at most {MAX_EXPRESSION_LENGTH})")
    if not source.isascii():
        # Python would NFKC-normalise identifiers (full-width letters spelling "retried").
        raise invalid("only ASCII characters are accepted")
    if "#" in source:
        raise invalid("comments (#) are not supported")
    if _max_paren_depth(source) > _MAX_PAREN_DEPTH:
        raise invalid(f"parentheses nested more than {_MAX_PAREN_DEPTH} levels deep")

    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as error:
        where = f" at column {error.offset}" if error.offset else ""
        raise invalid(f"not a valid expression ({error.msg or 'syntax error'}{where})") from None
    except (RecursionError, MemoryError, ValueError):
        raise invalid("not a valid expression (too complex to parse)") from None

    try:
        return _Compiler(source).compile(tree.body)
    except _CompileError as error:
        raise invalid(str(error)) from None
    except RecursionError:  # pragma: no cover - the depth limits make this unreachable
        raise invalid("expression is too complex") from None


# ------------------------------------------------------------------------------------------
# Server-directed retry timing
# ------------------------------------------------------------------------------------------

# Go's time.ParseDuration units, in nanoseconds. Both micro signs are accepted, as Go does:
# U+00B5 MICRO SIGN and U+03BC GREEK SMALL LETTER MU.
_INTEGER_SECONDS = re.compile(r"\d+")


def _http_date_ms(value: str, now_ms: int) -> int | None:
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000" means "UTC, source zone unknown"
        when = when.replace(tzinfo=timezone.utc)
    return max(0, round(when.timestamp() * 1000) - now_ms)


def _header_delay_ms(value: str, now_ms: int) -> int | None:
    value = value.strip()
    if not value:
        return None
    if _INTEGER_SECONDS.fullmatch(value):
        try:
            return int(value) * 1000
        except ValueError:  # more digits than int() allows: certainly more than a day
            return None
    duration = go_duration_ms(value)
    if duration is not None:
        return duration
    return _http_date_ms(value, now_ms)


def parse_retry_after(headers: Mapping[str, str], now_ms: int) -> int | None:
    """Delay in milliseconds that a failed response asks for, or ``None``.

    Looks at :data:`RETRY_AFTER_HEADERS` in order (names compared case-insensitively, so a
    plain ``dict`` works as well as ``httpx.Headers``). Each value may be integer seconds
    (``0`` = retry immediately), an HTTP date (delay = date - ``now_ms``, at least 0) or a
    Go-style duration such as ``6m5s``, ``1.5s`` or ``300ms``. The first header whose value
    parses to at most one day wins; unparseable values and delays beyond one day are skipped.
    ``None`` means the normal backoff applies.
    """
    lowered: dict[str, str] = {}
    for key, value in headers.items():
        lowered.setdefault(key.lower(), value)
    for name in RETRY_AFTER_HEADERS:
        raw = lowered.get(name)
        if raw is None:
            continue
        delay = _header_delay_ms(raw, now_ms)
        if delay is not None and 0 <= delay <= MAX_BACKOFF_MS:
            return delay
    return None


# ------------------------------------------------------------------------------------------
# Combination
# ------------------------------------------------------------------------------------------


def delay_before_retry_ms(
    *,
    retried: int,
    expression: RetryDelayExpression | None,
    response_headers: Mapping[str, str] | None,
    now_ms: int,
) -> int:
    """Milliseconds to wait before the next retry of a message whose attempt just failed.

    ``retried`` is the number of retries already performed, *not* counting the upcoming one:
    0 when the first attempt has failed (the value ``Upstash-Retried`` had on the failed
    delivery). Precedence: a usable server-directed header in ``response_headers``
    (:func:`parse_retry_after`), else ``expression.delay_ms(retried)``, else
    ``default_backoff_ms(retried + 1)``. ``now_ms`` is the current (virtual) time, needed for
    HTTP-date headers. Whether another retry is allowed at all is the caller's decision.

    An expression that fails to evaluate raises :class:`InvalidRetryDelay`: the caller
    decides what then (the store falls back to the default backoff rather than lose the
    message).
    """
    if retried < 0:
        raise ValueError(f"retried must be >= 0, got {retried}")
    if response_headers:
        directed = parse_retry_after(response_headers, now_ms)
        if directed is not None:
            return directed
    if expression is not None:
        return expression.delay_ms(retried)
    return default_backoff_ms(retried + 1)
