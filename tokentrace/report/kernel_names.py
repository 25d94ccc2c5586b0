"""Readable GPU kernel names: C++ names demangled, long names shortened for tables.

Proton (CUPTI) records C++ kernels by their mangled names (``_ZN2at6native29vectorized_...``),
the torch profiler by their demangled ones (``void at::native::vectorized_elementwise_kernel<4,
at::native::FillFunctor<float>, ...>(...)``), cuBLAS names generated kernels after their tiles
(``nvjet_sm90_tst_192x64_64x6_4x1_v_bz_NNT``). :func:`demangle` reads the subset of the Itanium
C++ ABI that CUDA kernels use (nested and local names, templates, lambdas, substitutions) and
writes what ``c++filt`` writes; :func:`short_name` and :func:`display_name` shorten for tables.
Names they cannot read come back unchanged.

Why not the engine's ``demangle()`` (PerfettoSQL's, LLVM's demangler): it writes LLVM's style
(``<a<b>>``, ``'lambda'()``), where the torch profiler records the GNU style (``<a<b> >``,
``{lambda()#1}``) that c++filt writes. The same kernel recorded by Proton and by the torch
profiler must have one name (tables, ``tokentrace diff``): of the 62 mangled kernel names in the
shared Proton traces, 58 demangle here to a name the torch profiler recorded, 8 through the
engine's (tests/report/test_kernel_names.py checks the first)."""

from __future__ import annotations

import re

_BUILTIN = {"v": "void", "w": "wchar_t", "b": "bool", "c": "char", "a": "signed char",
            "h": "unsigned char", "s": "short", "t": "unsigned short", "i": "int",
            "j": "unsigned int", "l": "long", "m": "unsigned long", "x": "long long",
            "y": "unsigned long long", "n": "__int128", "o": "unsigned __int128", "f": "float",
            "d": "double", "e": "long double", "g": "__float128", "z": "..."}
# c++filt's suffixes of integer literals (``Lm3E`` -> ``3ul``); other types print as casts
_LITERAL_SUFFIX = {"i": "", "j": "u", "l": "l", "m": "ul", "x": "ll", "y": "ull"}
_STD = {"a": "std::allocator", "b": "std::basic_string", "s": "std::string",
        "i": "std::istream", "o": "std::ostream", "d": "std::iostream"}
_OPERATORS = {"cl": "()", "ix": "[]", "eq": "==", "aS": "="}


class _Unsupported(ValueError):
    """A mangling outside the subset read here."""


class _Demangler:
    def __init__(self, text: str):
        self.s, self.i = text, 0
        self.subs: list[str] = []
        self.tparams: list[str] = []
        self.context: list[str] = []  # template args of the last templated name component

    def peek(self, ahead: int = 0) -> str:
        return self.s[self.i + ahead:self.i + ahead + 1]

    def expect(self, char: str) -> None:
        if self.peek() != char:
            raise _Unsupported(f"expected {char!r} at {self.i}")
        self.i += 1

    def number(self) -> int:
        start = self.i
        while self.peek().isdigit():
            self.i += 1
        if start == self.i:
            raise _Unsupported(f"expected a number at {start}")
        return int(self.s[start:self.i])

    def encoding(self, top: bool) -> str:
        """A function (or data) name. Template parameters (``T_``) stay placeholders until the
        function's own signature is read, then refer to its template arguments: a
        substitution of one read later means the template parameter of where it is used."""
        saved, self.context = self.tparams, []
        name, args, quals = self.name()
        if self.peek() in ("", "E", "."):
            return name  # data, not a function
        ret = ""
        self.tparams = args if args is not None else self.context
        if args is not None:
            ret = self.type()  # a template function's return type comes first
        params = []
        while self.peek() not in ("", "E", "."):
            params.append(self.type())
        if params == ["void"]:
            params = []
        ret, signature = (self.resolve(text) for text in (ret, f"({', '.join(params)}){quals}"))
        self.tparams = saved
        # c++filt leaves out the return type of a function that scopes a local name
        return f"{ret} {name}{signature}" if ret and top else f"{name}{signature}"

    def resolve(self, text: str) -> str:
        try:
            return _PARAM.sub(lambda match: self.tparams[int(match[1])], text)
        except IndexError:
            raise _Unsupported("template parameter out of range") from None

    def name(self) -> tuple[str, list[str] | None, str]:
        """(text, template args of the last component or None, cv-qualifiers of a member)."""
        if self.peek() == "N":
            return self.nested_name()
        if self.peek() == "Z":
            return self.local_name()
        substituted = self.peek() == "S" and self.peek(1) != "t"
        if substituted:
            text = self.substitution()  # a template's name: its arguments follow
        elif self.s.startswith("St", self.i):
            self.i += 2
            text = "std::" + self.unqualified_name()
        else:
            text = self.unqualified_name()
        if self.peek() != "I":
            if substituted:
                raise _Unsupported("substitution as a name")
            return text, None, ""
        if not substituted:
            self.subs.append(text)  # the template's name
        self.context = args = self.template_args()
        return text + _args_text(args), args, ""

    def nested_name(self) -> tuple[str, list[str] | None, str]:
        self.expect("N")
        quals = self.cv_qualifiers()
        if self.peek() in ("R", "O"):
            quals += " &" if self.peek() == "R" else " &&"
            self.i += 1
        prefix, args = "", None
        while self.peek() != "E":
            char = self.peek()
            if char == "I":
                if not prefix:
                    raise _Unsupported("template args without a name")
                self.context = args = self.template_args()
                prefix += _args_text(args)
            elif char == "S" and self.peek(1) == "t":
                self.i += 2
                prefix, args = "std", None
            elif char == "S":
                prefix, args = self.substitution(), None
            elif char == "T":
                prefix, args = self.template_param(), None
            elif char == "":
                raise _Unsupported("unterminated nested name")
            else:
                last = self.unqualified_name()
                prefix, args = (f"{prefix}::{last}" if prefix else last), None
            if char != "S" and self.peek() != "E":
                self.subs.append(prefix)
        self.i += 1
        return prefix, args, quals

    def local_name(self) -> tuple[str, None, str]:
        """(scope::entity, None, the entity's cv-qualifiers: a member function's)."""
        self.expect("Z")
        scope = self.encoding(top=False)
        self.expect("E")
        quals = ""
        if self.peek() == "s":
            self.i += 1
            entity = "string literal"
        else:
            entity, _, quals = self.name()
        if self.peek() == "_":  # discriminator: _<digit> or __<number>_
            self.i += 2
            if self.s[self.i - 1] == "_":
                self.number()
                self.i += 1
        return f"{scope}::{entity}", None, quals

    def unqualified_name(self) -> str:
        char, after = self.peek(), self.peek(1)
        if char.isdigit():
            length = self.number()
            text = self.s[self.i:self.i + length]
            if len(text) != length:
                raise _Unsupported("source name past the end")
            self.i += length
            text = "(anonymous namespace)" if text.startswith("_GLOBAL__N") else text
        elif char == "U" and after in ("l", "t"):
            self.i += 2
            params = []
            if after == "l":
                while self.peek() not in ("E", ""):
                    params.append(self.type())
                self.expect("E")
            index = self.number() + 2 if self.peek().isdigit() else 1
            self.expect("_")
            text = (f"{{lambda({', '.join(p for p in params if p != 'void')})#{index}}}"
                    if after == "l" else f"{{unnamed type#{index}}}")
        elif char == "L":
            self.i += 1
            return self.unqualified_name()
        elif self.s[self.i:self.i + 2] in _OPERATORS:
            text = "operator" + _OPERATORS[self.s[self.i:self.i + 2]]
            self.i += 2
        else:
            raise _Unsupported(f"unqualified name at {self.i}")
        return text

    def cv_qualifiers(self) -> str:
        quals = ""
        for char, word in (("r", " restrict"), ("V", " volatile"), ("K", " const")):
            if self.peek() == char:
                self.i += 1
                quals = word + quals
        return quals

    def type(self) -> str:
        char = self.peek()
        if char in _BUILTIN:
            self.i += 1
            return _BUILTIN[char]
        if char in ("r", "V", "K"):
            quals = self.cv_qualifiers()
            text = self.type() + quals
        elif char in ("P", "R", "O"):
            self.i += 1
            text = self.type() + {"P": "*", "R": "&", "O": "&&"}[char]
        elif char == "S" and self.peek(1) != "t":
            text = self.substitution()
            if self.peek() != "I":
                return text  # a plain substitution is not a new candidate
            text += _args_text(self.template_args())
        elif char == "T":
            text = self.template_param()
            if self.peek() == "I":
                self.subs.append(text)
                text += _args_text(self.template_args())
        elif char in ("N", "Z") or char.isdigit() or char == "S":
            text, _, quals = self.name()
            text += quals
        else:
            raise _Unsupported(f"type at {self.i}")
        self.subs.append(text)
        return text

    def substitution(self) -> str:
        self.expect("S")
        char = self.peek()
        if char in _STD:
            self.i += 1
            return _STD[char]
        index = 0
        if char != "_":
            start = self.i
            while self.peek().isalnum() and self.peek().upper() == self.peek():
                self.i += 1
            index = int(self.s[start:self.i], 36) + 1
        self.expect("_")
        if index >= len(self.subs):
            raise _Unsupported(f"substitution {index} of {len(self.subs)}")
        return self.subs[index]

    def template_param(self) -> str:
        self.expect("T")
        index = 0 if self.peek() == "_" else self.number() + 1
        self.expect("_")
        return f"\x01{index}\x02"

    def template_args(self) -> list[str]:
        self.expect("I")
        args = []
        while self.peek() not in ("E", ""):
            args.append(self.template_arg())
        self.expect("E")
        return args

    def template_arg(self) -> str:
        char = self.peek()
        if char == "L":
            return self.literal()
        if char == "X":
            self.i += 1
            text = self.template_param() if self.peek() == "T" else self.literal()
            self.expect("E")
            return text
        if char == "J":
            self.i += 1
            pack = []
            while self.peek() not in ("E", ""):
                pack.append(self.template_arg())
            self.expect("E")
            return ", ".join(pack)
        return self.type()

    def literal(self) -> str:
        self.expect("L")
        if self.peek() in ("_", "Z"):  # L_Z <encoding> E: an external name
            self.i += self.peek() == "_"
            self.expect("Z")
            text = self.encoding(top=False)
            self.expect("E")
            return text
        kind, negative = self.peek(), self.peek(1) == "n"
        self.i += 1 + negative
        value = ("-" if negative else "") + str(self.number())
        self.expect("E")
        if kind == "b":
            return "true" if value == "1" else "false"
        if kind in _LITERAL_SUFFIX:
            return value + _LITERAL_SUFFIX[kind]
        return f"({_BUILTIN.get(kind, kind)}){value}"


def _args_text(args: list[str]) -> str:
    inner = ", ".join(args)
    return f"<{inner} >" if inner.endswith(">") else f"<{inner}>"


def demangle(name: str) -> str:
    """``_Z...`` -> its C++ name as ``c++filt`` writes it; any other name, or one using
    manglings outside the subset read here, unchanged."""
    if not name.startswith("_Z"):
        return name
    parser = _Demangler(name)
    parser.i = 2
    try:
        text = parser.encoding(top=True)
        if "\x01" in text:
            return name
    except (_Unsupported, IndexError, ValueError):
        return name
    if parser.peek() == ".":  # a clone suffix (.cold, .isra.0)
        text += f" [clone {parser.s[parser.i:]}]"
    elif parser.i != len(name):
        return name
    return text


_ANON = "(anonymous namespace)"
_PARAM = re.compile("\x01(\\d+)\x02")
_CXX = re.compile(r"\w[<(]|::")  # a C++ signature, not 'Memcpy DtoH (Device -> Pinned)'


def _strip_templates(text: str) -> str:
    """Text at template depth 0 (everything inside ``<...>`` dropped)."""
    out, depth = [], 0
    for char in text:
        if char in "<>":
            depth = max(0, depth + (1 if char == "<" else -1))
        elif not depth:
            out.append(char)
    return "".join(out)


def _template_args(text: str) -> list[str]:
    """The arguments of the first template argument list in ``text``, split at depth 0."""
    start = text.find("<")
    args, depth, begin = [], 0, start + 1
    for pos in range(max(start, 0), len(text)):
        char = text[pos]
        depth += (char in "<({") - (char in ">)}")
        if (char == "," and depth == 1) or depth == 0:
            args.append(text[begin:pos].strip())
            begin = pos + 1
        if depth == 0:
            break
    return args if start >= 0 else []


def _function_name(text: str) -> str:
    """The qualified name of a demangled function: no return type, templates or parameters,
    no ``(anonymous namespace)``."""
    flat = _strip_templates(text.replace(_ANON, "\0"))
    depth, end = 0, len(flat)
    for pos, char in enumerate(flat):
        depth += (char == "{") - (char == "}")
        if char == "(" and not depth:
            end = pos
            break
    head = flat[:end].strip().rsplit(" ", 1)[-1]  # no return type
    return "::".join(p for p in head.split("::") if p and p != "\0")


# Vendor kernels named after their configuration: the family, tile (and cluster) and layout.
_VENDOR = [
    # cuBLAS nvjet: nvjet_sm90_tst_<tile>_<k x stages>_<cluster>_<raster>_bz[_variant]_<layout>
    (re.compile(r"^(nvjet_[a-z0-9]+_[a-z]+)_(\d+x\d+)_\d+x\d+_(\d+x\d+)_[a-z]+_[a-z]+((?:_[A-Za-z]+)*)_([NT]+)$"),
     lambda m: f"{m[1]} {m[2]} {m[3]}{m[4].replace('_', ' ')} {m[5]}"),
    (re.compile(r"^(sm\d+_xmma_\w+?)_tilesize(\d+x\d+x\d+)_.*$"), lambda m: f"{m[1]} {m[2]}"),
    (re.compile(r"^cudnn_generated_fort_native_(\w+?)_knob_\d+_(\d+x\d+x\d+)_.*$"),
     lambda m: f"cudnn {m[1]} {m[2]}"),
    (re.compile(r"^(cutlass\w*?)_align\d+\w*$"), lambda m: m[1]),
]
_CUTLASS_WRAPPERS = {"cutlass::Kernel", "cutlass::Kernel2", "cutlass::device_kernel"}


def short_name(name: str) -> str:
    """A kernel's name for a table: the qualified function name of a C++ kernel, mangled or
    not (``at::native::vectorized_elementwise_kernel``), the kernel inside a cutlass wrapper;
    the family, tile and layout of generated cuBLAS / cuDNN / cutlass kernels
    (``nvjet_sm90_tst 192x64 4x1 NNT``, ``cudnn sdpa_sm90_flash_fprop_wgmma_f16 64x128x128``);
    other names (Triton's, ``Memcpy DtoH (Device -> Pinned)``, ``<metric>``) as they are."""
    text = demangle(name)
    if _CXX.search(text):
        short = _function_name(text)
        if short in _CUTLASS_WRAPPERS and _template_args(text):
            short = _function_name(_template_args(text)[0])
        text = short or text
    for pattern, form in _VENDOR:
        match = pattern.match(text)
        if match:
            return form(match)
    return text


# Wrappers in the template arguments of PyTorch's generic kernels, around the operation.
_WRAPPERS = {"gpu_kernel_impl_nocast", "gpu_kernel_impl", "BinaryFunctor", "AUnaryFunctor",
             "BUnaryFunctor", "UnaryFunctor", "ReduceOp", "func_wrapper_t", "operator", "lambda"}
_IDENT = re.compile(r"[A-Za-z_]\w*")
_FUNCTOR = re.compile(r"[Ff]unctor|Ops?$")


def _operation(args: str) -> str | None:
    """The operation named in a kernel's template arguments: the first function a lambda is
    local to (``direct_copy_kernel_cuda``), else the innermost functor (``MulFunctor``)."""
    functors = []
    for match in _IDENT.finditer(args):
        ident, pos = match.group(), match.end()
        if ident in _WRAPPERS:
            continue  # look inside it
        if args[pos:pos + 1] == "<":  # past its own template arguments
            depth = 0
            for pos in range(pos, len(args)):
                depth += (args[pos] == "<") - (args[pos] == ">")
                if not depth:
                    pos += 1
                    break
        if args[pos:pos + 1] == "(":
            return ident
        if _FUNCTOR.search(ident):
            functors.append(ident)
    return functors[-1] if functors else None


def display_name(name: str) -> str:
    """:func:`short_name` plus, for a templated ``at::native`` kernel, the operation it runs:
    ``at::native::vectorized_elementwise_kernel [FillFunctor]``,
    ``at::native::elementwise_kernel [direct_copy_kernel_cuda]``."""
    short = short_name(name)
    if not short.startswith("at::native::"):
        return short
    op = _operation(", ".join(_template_args(demangle(name))))
    return f"{short} [{op}]" if op else short
