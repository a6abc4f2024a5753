"""The Jinja environment every project file is rendered in — models, macros, tests, descriptions,
hooks, ``project.yml`` values: sandboxed, and bounded.

**Sandboxed.** CI compiles pull requests, so a template must not run code: it renders in Jinja's
``SandboxedEnvironment`` (as dbt's do), where attributes starting with ``_`` (``__globals__``,
``__subclasses__``, ``__init__``) and Python's internal attributes are out of reach; here modules
are too, except through dbt's ``modules`` namespace (``modules.datetime``, never
``modules.re.enum.sys``), and templates are read from inside the project only. Reaching for one
is a ``SecurityError``, which callers report as ``[unsafe-template]`` at the template's line.

**Bounded.** A template is small; what it renders must not be huge, and must be stopped before
the memory is spent rather than measured after: the output is counted as it streams out
(``render``), and so is every buffer a macro, a ``{% set %}`` block or a ``{% filter %}`` block
fills; strings, lists and numbers that ``*``, ``**``, ``+``, ``%``, ``~``, a method, a filter or an
attribute produce are checked against the same limit (padding and ``replace`` before they run);
``range()`` gives at most 100,000 items (the sandbox's ``MAX_RANGE``). Passing a limit is a
``TooLarge`` error, reported as ``[too-large]``.

What stays possible is spending time without producing anything (nested loops with an empty
body): the limits are on size, not on time.
"""

from __future__ import annotations

import functools
import math
import re
import string
import sys
import types
from typing import Any, Callable, Iterator, Mapping

import jinja2
from jinja2.environment import TemplateModule
from jinja2.compiler import CodeGenerator, Frame, MacroRef
import jinja2.runtime
from jinja2.nodes import Concat
from jinja2.sandbox import MAX_RANGE, SandboxedEnvironment, SecurityError
from jinja2.utils import _PassArg

__all__ = ["MAX_RANGE", "UNSAFE_HINT", "Modules", "Sandbox", "SecurityError", "TooLarge"]


#: What to do about a SecurityError, for every caller that reports one.
UNSAFE_HINT = ("templates may use ref, source, var, config, macros and dbt's modules.*, not Python's internals "
               "(names starting with _, modules, files outside the project): mvflow renders them in Jinja's sandbox")


class TooLarge(jinja2.TemplateRuntimeError):
    """A render that passed its size limit; ``line`` is the template line producing output then (if known)."""

    def __init__(self, message: str, hint: str, line: int | None = None):
        super().__init__(message)
        self.hint = hint
        self.line = line


class Modules(types.SimpleNamespace):
    """dbt's ``modules`` (``modules.datetime``): the one object whose attributes may be modules."""


class Sandbox(SandboxedEnvironment):
    """A sandboxed Jinja environment whose renders stop at ``limit`` characters (and items).

    >>> env = Sandbox(limit=100)
    >>> env.from_string("{{ 'ab' * 3 }} {{ range(3)|list }}").render()
    'ababab [0, 1, 2]'
    >>> env.from_string("{{ self.__init__.__globals__ }}").render()
    Traceback (most recent call last):
    ...
    jinja2.exceptions.SecurityError: access to attribute '__init__' of 'TemplateReference' object is unsafe.
    >>> env.from_string("{{ 'ab' * 100 }}").render()
    Traceback (most recent call last):
    ...
    compiler.sandbox.TooLarge: 'ab' * 100 would make a value of 200 characters, over the limit of 100
    """

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, *args: Any, limit: int, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.limit = limit
        self.code_generator_class = _BoundedCodeGenerator
        self.macro_class = jinja2.runtime.Macro  # what a {% macro %} makes (compiler/dbt/context.py's: return())
        self.template_class = _BoundedTemplate
        self.globals["range"] = self._range
        self.filters = {name: self._bounded_filter(name, func) for name, func in self.filters.items()}

    # -- what a template may reach ------------------------------------------------------------
    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if isinstance(value, types.ModuleType) and not isinstance(obj, Modules):
            return False  # re.enum.sys.modules['os'] has no underscore in it
        return super().is_safe_attribute(obj, attr, value)

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        """Refused at once (Jinja returns an undefined that fails when used: ``''|attr('__class__')|attr('x')``
        then fails as 'no attribute', which hides why)."""
        raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe.")

    # -- what a template may build --------------------------------------------------------------
    def bounded(self, value: Any, what: str = "a value") -> Any:
        """``value``, unless it is a string or collection longer than the limit, or an integer of more bits
        than the limit's characters hold."""
        if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)):
            if len(value) > self.limit:
                raise self._too_large(f"{what} of {len(value):,} {'characters' if isinstance(value, (str, bytes)) else 'items'}")
        elif isinstance(value, int) and value.bit_length() > 8 * self.limit:
            raise self._too_large(f"{what}: a number of {value.bit_length():,} bits", unit="bits", limit=8 * self.limit)
        return value

    def bounded_buffer(self) -> list:
        return _Buffer(self)

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for sequence, times in ((left, right), (right, left)):
                if isinstance(sequence, (str, bytes, list, tuple)) and isinstance(times, int) and len(sequence) * times > self.limit:
                    raise self._too_large(f"{_short(left)} * {_short(right)} would make a value of {len(sequence) * times:,} "
                                          f"{'characters' if isinstance(sequence, (str, bytes)) else 'items'}")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
            if right * math.log2(abs(left)) > 8 * self.limit:
                raise self._too_large(f"{_short(left)} ** {_short(right)} would be a number of {int(right * math.log2(abs(left))):,} bits",
                                      unit="bits", limit=8 * self.limit)
        elif operator == "%" and isinstance(left, str):
            self._check_width(_widest_percent(left), left)
        return self.bounded(super().call_binop(context, operator, left, right), f"{operator} made a value")

    def call(__self, __context: jinja2.runtime.Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        owner = __obj.__self__ if isinstance(__obj, types.BuiltinMethodType) else None  # 'x'.ljust, l.append
        if isinstance(owner, str):
            __self._check_width(_grown_length(__obj.__name__, owner, (*args, *kwargs.values())), owner)
        elif isinstance(__obj, types.FunctionType):
            wrapped = getattr(getattr(__obj, "__wrapped__", None), "__self__", None)
            if isinstance(wrapped, str):  # str.format, as the sandbox wraps it
                __self._check_width(_widest_format(wrapped), wrapped)
        result = super().call(__context, __obj, *args, **kwargs)
        if isinstance(owner, (list, dict, set)):  # l.append(...): the list itself may grow past the limit
            __self.bounded(owner, "a collection")
        return __self.bounded(result, f"{getattr(__obj, '__name__', 'a call')}() returned a value")

    def getattr(self, obj: Any, attribute: str) -> Any:
        return self.bounded(super().getattr(obj, attribute))

    def getitem(self, obj: Any, argument: Any) -> Any:
        return self.bounded(super().getitem(obj, argument))

    def _range(self, *args: int) -> range:
        numbers = range(*args)
        if len(numbers) > MAX_RANGE:
            raise TooLarge(f"range() of {len(numbers):,} items, over the limit of {MAX_RANGE:,}",
                           hint=f"loop over at most {MAX_RANGE:,} items")
        return numbers

    def _bounded_filter(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        passes = _PassArg.from_obj(func) is not None  # called as func(context or environment, value, ...)

        @functools.wraps(func)
        def bounded(*args: Any, **kwargs: Any) -> Any:
            rest = args[1:] if passes else args
            if rest and isinstance(rest[0], str):
                text, extra = rest[0], (*rest[1:], *kwargs.values())
                self._check_width(_widest_percent(text) if name == "format" else _grown_length(name, text, extra), text)
            elif name == "join" and rest and isinstance(rest[0], (list, tuple)):
                separator = rest[1] if len(rest) > 1 else kwargs.get("d", "")
                self._check_width(_grown_length("join", str(separator), (rest[0],)), str(separator))
            return self.bounded(func(*args, **kwargs), f"the filter {name} made a value")

        return bounded

    def _check_width(self, length: int, text: str) -> None:
        if length > self.limit:
            raise self._too_large(f"formatting, padding or joining {_short(text)} would make a value of {length:,} characters")

    def _too_large(self, what: str, unit: str = "", limit: int | None = None) -> TooLarge:
        return TooLarge(f"{what}, over the limit of {limit or self.limit:,}{' ' + unit if unit else ''}",
                        hint=f"a template may not build values over {self.limit:,} characters or items: build smaller ones")


class _BoundedTemplate(jinja2.Template):
    """A template whose output, rendered or as a module's body (a macro file's, an ``{% import %}``'s),
    stops at the environment's limit: a TooLarge error at the line producing output then.

    >>> Sandbox(limit=10).from_string("{% for i in range(20) %}\\n{{ i }}{% endfor %}").render()
    Traceback (most recent call last):
    ...
    compiler.sandbox.TooLarge: the template renders to more than 10 characters
    """

    def render(self, *args: Any, **kwargs: Any) -> str:
        context = self.new_context(dict(*args, **kwargs))
        try:
            return self.environment.concat(self._bounded(self.root_render_func(context)))  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - as Jinja's own render: the traceback shows template lines
            self.environment.handle_exception()

    def make_module(self, vars: dict[str, Any] | None = None, shared: bool = False,
                    locals: Mapping[str, Any] | None = None) -> TemplateModule:
        context = self.new_context(vars, shared, locals)
        return TemplateModule(self, context, list(self._bounded(self.root_render_func(context))))

    def _bounded(self, stream: Iterator[str]) -> Iterator[str]:
        limit = self.environment.limit  # type: ignore[attr-defined]
        size = 0
        for chunk in stream:
            size += len(chunk)
            if size > limit:
                frame = getattr(stream, "gi_frame", None)
                raise TooLarge(f"the template renders to more than {limit:,} characters"
                               + (f" ({limit / 2**20:g} MB)" if limit >= 2**20 else ""),
                               hint="split the model, or move generated data into a source table",
                               line=self.get_corresponding_lineno(frame.f_lineno) if frame is not None else None)
            yield chunk


class _Buffer(list):
    """A template's buffer (a macro's body, a ``{% set %}`` or ``{% filter %}`` block) that stops at the limit."""

    def __init__(self, env: Sandbox):
        super().__init__()
        self._env = env
        self._size = 0

    def append(self, item: Any) -> None:
        self._grow(len(item) if isinstance(item, str) else 1)
        super().append(item)

    def extend(self, items: Any) -> None:
        if isinstance(items, tuple):  # what Jinja's code writes: the pieces of one output
            self._grow(sum(len(item) if isinstance(item, str) else 1 for item in items))
            super().extend(items)
        else:
            for item in items:  # one at a time: an {% include %} in a macro is a stream
                self.append(item)

    def _grow(self, size: int) -> None:
        self._size += size
        if self._size > self._env.limit:
            raise TooLarge(f"a macro or block renders to more than {self._env.limit:,} characters",
                           hint="split the macro's output, or move generated data into a source table")


class _BoundedCodeGenerator(CodeGenerator):
    """Jinja's code generator, with bounded buffers and ``~`` (see ``Sandbox.bounded``)."""

    def buffer(self, frame: Frame) -> None:
        frame.buffer = self.temporary_identifier()
        self.writeline(f"{frame.buffer} = environment.bounded_buffer()")

    def macro_def(self, macro_ref: MacroRef, frame: Frame) -> None:
        """Jinja's, with the environment's ``macro_class`` (dbt's ``return()``: ``compiler.dbt.context``)."""
        args = [repr(arg.name) for arg in macro_ref.node.args]
        self.write(f"environment.macro_class(environment, macro, {getattr(macro_ref.node, 'name', None)!r}, "
                   f"({', '.join(args)}{',' if len(args) == 1 else ''}), {macro_ref.accesses_kwargs!r}, "
                   f"{macro_ref.accesses_varargs!r}, {macro_ref.accesses_caller!r}, context.eval_ctx.autoescape)")

    def visit_Concat(self, node: Concat, frame: Frame) -> None:
        self.write("environment.bounded(")
        super().visit_Concat(node, frame)
        self.write(", '~ made a value')")


def _grown_length(name: str, text: str, args: tuple) -> int:
    """An upper bound of the length of ``text.<name>(*args)`` (or the filter ``name``) for the methods
    and filters that can make a long string out of a short one; 0 for the others.

    >>> _grown_length("center", "x", (10,)), _grown_length("replace", "aaa", ("a", "bb")), _grown_length("upper", "x", ())
    (10, 6, 0)
    >>> _grown_length("join", ", ", (["a", "b"],))
    6
    """
    first = args[0] if args else None
    if name in ("center", "ljust", "rjust", "zfill") and isinstance(first, int):
        return first
    if name == "expandtabs":
        return len(text) * (first if isinstance(first, int) and first > 0 else 8)
    if name == "indent":
        width = first if isinstance(first, int) else len(str(first if first is not None else "    "))
        return len(text) + (text.count("\n") + 1) * width
    if name == "join" and isinstance(first, (list, tuple)):
        return sum(len(item) if isinstance(item, str) else 1 for item in first) + len(text) * len(first)
    if name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        count = text.count(args[0]) if args[0] else len(text) + 1
        if len(args) > 2 and isinstance(args[2], int) and args[2] >= 0:
            count = min(count, args[2])
        return len(text) + count * max(len(args[1]) - len(args[0]), 0)
    return 0


_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\d*)(?:\.(\d*))?")


def _widest_percent(text: str) -> int:
    """The widest width or precision in a ``%`` format (``'%0999999d'``).

    >>> _widest_percent("%-8s | %.3f"), _widest_percent("100%")
    (8, 0)
    """
    return max((_number(n) for spec in _PERCENT_SPEC.findall(text) for n in spec if n), default=0)


def _widest_format(text: str) -> int:
    """The widest width or precision in a ``str.format`` format (``'{:>999999}'``).

    >>> _widest_format("{0:>8} {1:.3f} {{x}}")
    8
    """
    try:
        specs = [spec for _, _, spec, _ in string.Formatter().parse(text) if spec]
    except ValueError:
        return 0  # format() itself will say what is wrong
    return max((_number(n) for spec in specs for n in re.findall(r"\d+", spec)), default=0)


def _number(digits: str) -> int:
    return int(digits) if len(digits) < 10 else sys.maxsize


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 20 else text[:17] + "..."
