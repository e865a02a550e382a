"""Static checks of a `triton` candidate, before any of it runs.

A candidate is a Python module: `@triton.jit` kernels and one launcher,
`kope_kernel(inputs, outputs, attrs)`, that allocates nothing it does not need and launches
kernels. These rules close the known ways a GPU candidate gets a good verdict without doing
the work in its own kernels: PyTorch computing for it, work on a side stream the clock does
not see, background threads, writing results from Python, outputs replaced or aliased, and
lower precision than the operator's dtype. The harness checks the same at run time
(apps/devices/gpu/harness.py); this catches them with a line number, and keeps the module
from reaching the process around it (imports, builtins, dunder attributes).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

ENTRY = "kope_kernel"
ALLOWED_IMPORTS = ("torch", "triton", "triton.language", "math", "typing", "__future__")
BANNED_BUILTINS = frozenset({
    "eval", "exec", "compile", "open", "__import__", "globals", "locals", "vars", "getattr",
    "setattr", "delattr", "breakpoint", "input", "print", "memoryview", "exit", "quit", "help",
    "object", "type", "super", "classmethod", "staticmethod", "property",
})  # fmt: skip
# Side streams, graphs and events: work the timing stream would not see.
STREAM_NAMES = frozenset({
    "Stream", "stream", "set_stream", "ExternalStream", "current_stream", "default_stream",
    "Event", "CUDAGraph", "graph", "graphs", "synchronize", "StreamContext",
})  # fmt: skip
# PyTorch namespaces that compute.
TORCH_COMPUTE = frozenset({"nn", "ops", "compile", "library", "fft", "linalg", "special",
                           "autograd", "func", "jit", "backends", "_C", "sparse"})  # fmt: skip
# What a launcher may call on tensors and on torch/triton: shapes, strides, allocation.
LAUNCHER_METHODS = frozenset({
    "numel", "size", "stride", "dim", "is_contiguous", "element_size", "data_ptr",
    "storage_offset", "view", "cdiv", "next_power_of_2", "empty", "empty_like", "empty_strided",
    "zeros", "zeros_like", "Config", "ceil", "floor", "log2", "sqrt", "isqrt", "gcd",
})  # fmt: skip
# Reading these from a tensor gives a number or a description, not a tensor.
SCALAR_ATTRIBUTES = frozenset({
    "shape", "dtype", "device", "ndim", "numel", "size", "stride", "dim", "is_contiguous",
    "element_size", "data_ptr", "storage_offset",
})  # fmt: skip
LAUNCHER_BUILTINS = frozenset({
    "len", "range", "min", "max", "int", "float", "bool", "abs", "tuple", "list", "enumerate",
    "zip", "isinstance", "ValueError", "RuntimeError", "TypeError", "AssertionError", "dict",
    "sorted", "divmod", "round", "str",
})  # fmt: skip
JIT_DECORATORS = frozenset({"jit", "autotune", "heuristics"})
LOW_PRECISION = frozenset({"float16", "bfloat16", "half", "fp16", "bf16", "tf32", "tf32x3"})
LOW_PRECISION_PREFIXES = ("float8", "fp8")


@dataclass
class Checker(ast.NodeVisitor):
    dtypes: set[str]
    problems: list[str] = field(default_factory=list)
    jit_functions: set[str] = field(default_factory=set)
    module_functions: set[str] = field(default_factory=set)
    in_jit: bool = False
    in_function: bool = False
    tensor_names: set[str] = field(default_factory=set)

    def problem(self, node: ast.AST, text: str) -> None:
        self.problems.append(f"line {getattr(node, 'lineno', '?')}: {text}")

    # --- the module's shape

    def check_module(self, tree: ast.Module) -> None:
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                self.module_functions.add(node.name)
                if any(decorator_name(d) in JIT_DECORATORS for d in node.decorator_list):
                    self.jit_functions.add(node.name)
        for node in tree.body:
            self.check_top_level(node)
        self.visit(tree)
        self.check_entry(tree)

    def check_top_level(self, node: ast.stmt) -> None:
        allowed = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.Assign, ast.AnnAssign)
        docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        if not isinstance(node, allowed) and not docstring:
            self.problem(node, f"only imports, functions and constants at module level, "
                         f"not {type(node).__name__}")  # fmt: skip

    def check_entry(self, tree: ast.Module) -> None:
        entry = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == ENTRY]
        if not entry:
            self.problems.append(f"the module defines no {ENTRY}(inputs, outputs, attrs)")
            return
        arguments = entry[0].args
        if len(arguments.args) != 3 or arguments.vararg or arguments.kwarg:
            self.problem(entry[0], f"{ENTRY} takes exactly (inputs, outputs, attrs)")
        if ENTRY in self.jit_functions:
            self.problem(entry[0], f"{ENTRY} is the Python launcher, not a @triton.jit kernel")

    # --- imports and names

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.check_import(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        self.check_import(node, module)
        for alias in node.names:
            self.check_import(node, f"{module}.{alias.name}", imported_name=True)

    def check_import(self, node: ast.AST, name: str, *, imported_name: bool = False) -> None:
        parts = name.split(".")
        top = parts[0]
        if top in ("math", "typing", "__future__"):
            return
        if top == "triton" and (
            len(parts) == 1
            or parts[1] == "language"
            or (
                imported_name
                and len(parts) == 2
                and parts[1]
                in ("jit", "cdiv", "Config", "autotune", "heuristics", "next_power_of_2")
            )
        ):
            return
        if top == "torch" and (len(parts) == 1 or (imported_name and len(parts) == 2
                               and parts[1] == "Tensor")):  # fmt: skip
            return
        self.problem(node, f"import of {name}: a candidate imports only torch, triton, "
                     "triton.language and math")  # fmt: skip

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in BANNED_BUILTINS:
            self.problem(node, f"{node.id} is not available to a candidate")
        elif is_dunder(node.id):
            self.problem(node, f"{node.id}: dunder names are not available to a candidate")
        self.check_precision_word(node, node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if is_dunder(node.attr):
            self.problem(node, f".{node.attr}: dunder attributes are not available to a candidate")
        if node.attr in STREAM_NAMES:
            self.problem(
                node,
                f".{node.attr}: streams, events, graphs and synchronisation "
                "belong to the harness (work on a side stream escapes the clock)",
            )
        root = dotted(node)  # checked once per chain, at its `torch.<name>` link
        if root.count(".") == 1 and root.startswith("torch.") and node.attr in TORCH_COMPUTE:
            self.problem(node, f"{root}: PyTorch computing is not the candidate's kernel")
        if root in ("torch.cuda", "torch.backends"):
            self.problem(node, f"{root}: device state belongs to the harness")
        if isinstance(node.ctx, ast.Store | ast.Del):
            self.problem(node, f"assignment to .{node.attr}: a candidate changes no object's "
                         "attributes (outputs are written by kernels)")  # fmt: skip
        self.check_precision_word(node, node.attr)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self.check_precision_word(node, node.value)

    def check_precision_word(self, node: ast.AST, word: str) -> None:
        """Half precision, bfloat16, FP8 or TF32 named where the operator has none."""
        if self.dtypes and not self.dtypes & {"float16", "bfloat16"}:
            lowered = word.lower()
            if lowered in LOW_PRECISION or lowered.startswith(LOW_PRECISION_PREFIXES):
                self.problem(node, f"{word}: the operator's tensors are "
                             f"{', '.join(sorted(self.dtypes))}; computing in lower precision "
                             "is a precision downgrade")  # fmt: skip

    def visit_Global(self, node: ast.Global) -> None:
        self.problem(node, "global: a launcher keeps no state between calls")

    visit_Nonlocal = visit_Global  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.problem(node, "classes are not needed in a candidate")

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self.problem(node, "async functions are not needed in a candidate")

    # --- functions: kernels and the launcher

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for decorator in node.decorator_list:
            if decorator_name(decorator) not in JIT_DECORATORS:
                self.problem(decorator, "only @triton.jit, @triton.autotune and "
                             "@triton.heuristics decorate a candidate's functions")  # fmt: skip
        outer = (self.in_jit, self.in_function, set(self.tensor_names))
        self.in_jit, self.in_function = node.name in self.jit_functions, True
        if node.name == ENTRY:
            self.tensor_names = {a.arg for a in node.args.args[:2]}
        for statement in node.body:
            self.visit(statement)
        for decorator in node.decorator_list:
            self.visit(decorator)
        self.in_jit, self.in_function, self.tensor_names = outer

    def visit_Assign(self, node: ast.Assign) -> None:
        if self.in_function and not self.in_jit:
            for target in node.targets:
                if isinstance(target, ast.Subscript):
                    self.problem(node, "the launcher writes a tensor from Python: outputs are "
                                 "written by Triton kernels")  # fmt: skip
            if self.is_tensor(node.value):
                self.tensor_names |= {n.id for t in node.targets for n in ast.walk(t)
                                      if isinstance(n, ast.Name)}  # fmt: skip
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if (
            self.in_function
            and not self.in_jit
            and (isinstance(node.target, ast.Subscript) or self.is_tensor(node.target))
        ):
            self.problem(node, "the launcher does tensor arithmetic in Python")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if (
            self.in_function
            and not self.in_jit
            and (self.is_tensor(node.left) or self.is_tensor(node.right))
        ):
            self.problem(node, "the launcher does tensor arithmetic in Python: only Triton "
                         "kernels may compute")  # fmt: skip
        self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if self.in_function and not self.in_jit and self.is_tensor(node.operand):
            self.problem(node, "the launcher does tensor arithmetic in Python")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        for keyword in node.keywords:
            if keyword.arg in ("stream", "out"):
                self.problem(node, f"{keyword.arg}=: launches go on the harness's stream and "
                             "write only through kernels")  # fmt: skip
        if self.in_jit:
            if dotted(node.func).startswith("torch"):
                self.problem(node, "PyTorch inside a Triton kernel")
            self.check_dot_precision(node)
        elif self.in_function:
            self.check_launcher_call(node)
        self.generic_visit(node)

    def check_dot_precision(self, node: ast.Call) -> None:
        if not (isinstance(node.func, ast.Attribute) and node.func.attr == "dot"):
            return
        if "float32" not in self.dtypes and "float64" not in self.dtypes:
            return
        precision = {k.arg: k.value for k in node.keywords}.get("input_precision")
        if not (isinstance(precision, ast.Constant) and precision.value == "ieee"):
            self.problem(node, "tl.dot on float32 data needs input_precision=\"ieee\" (the "
                         "default on a GPU is TF32: a precision downgrade)")  # fmt: skip

    def check_launcher_call(self, node: ast.Call) -> None:
        function = node.func
        if isinstance(function, ast.Subscript):  # kernel[grid](...)
            if dotted(function.value) not in self.jit_functions:
                self.problem(node, "only @triton.jit kernels are launched with [grid]")
            return
        if isinstance(function, ast.Name):
            if function.id not in LAUNCHER_BUILTINS | self.module_functions:
                self.problem(node, f"{function.id}() in the launcher")
            return
        if isinstance(function, ast.Attribute) and function.attr not in LAUNCHER_METHODS:
            self.problem(node, f".{function.attr}() in the launcher: a launcher reads shapes, "
                         "allocates and launches kernels; PyTorch does no work for it")  # fmt: skip

    def is_tensor(self, node: ast.AST) -> bool:
        """An expression that is a tensor the launcher was given (or a view of one), not a
        number read from it (x.shape[0], x.numel())."""
        if isinstance(node, ast.Name):
            return node.id in self.tensor_names
        if isinstance(node, ast.Subscript):
            return self.is_tensor(node.value)
        if isinstance(node, ast.Starred):
            return self.is_tensor(node.value)
        if isinstance(node, ast.Attribute):
            return node.attr not in SCALAR_ATTRIBUTES and self.is_tensor(node.value)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            return node.func.attr not in SCALAR_ATTRIBUTES and self.is_tensor(node.func.value)
        return False


def is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return dotted(node.func)
    return ""


def decorator_name(node: ast.AST) -> str:
    return dotted(node).rsplit(".", 1)[-1]


def triton_problems(source: str, *, dtypes: set[str]) -> list[str]:
    """What in this module breaks the rules, one line each; [] when nothing does.

    `dtypes` are the operator's tensor dtypes: on float32/float64 operators, half precision,
    bfloat16, FP8 and TF32 are a precision downgrade.
    """
    try:
        tree = ast.parse(source, filename="candidate.py")
    except SyntaxError as error:
        return [f"line {error.lineno}: {error.msg}"]
    checker = Checker(dtypes=set(dtypes))
    checker.check_module(tree)
    return list(dict.fromkeys(checker.problems))
