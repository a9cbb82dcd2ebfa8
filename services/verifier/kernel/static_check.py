"""Source checks of a candidate before anything runs (KernelBench's checker, on the AST).

Each hit names its detector. The dynamic checks in the harness and the verifier back these
up: a call hidden behind ``getattr`` escapes this module but not the profiler.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

THREAD_MODULES = {
    "threading",
    "_thread",
    "concurrent",
    "multiprocessing",
    "asyncio",
    "subprocess",
    "signal",
}
THREAD_ATTRS = {
    "Stream",
    "stream",
    "ExternalStream",
    "fork",
    "forkpty",
    "system",
    "spawnv",
    "popen",
    "Thread",
}
GRAPH_ATTRS = {"CUDAGraph", "graph", "make_graphed_callables", "graph_pool_handle"}
TIMER_ATTRS = {"perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "process_time", "time_ns",
               "elapsed_time", "synchronize", "set_num_threads", "set_num_interop_threads"}  # fmt: skip
INTROSPECTION = {"_getframe", "get_objects", "get_referrers", "modules", "__main__", "settrace", "setprofile",
                 "currentframe", "f_back", "f_globals", "__defaults__", "__code__", "__closure__"}  # fmt: skip
LAZY_ATTRS = {
    "_make_subclass",
    "__torch_function__",
    "__torch_dispatch__",
    "as_subclass",
    "_make_wrapper_subclass",
}
LOW_PRECISION = {"float16", "half", "bfloat16", "float8_e4m3fn", "float8_e5m2", "allow_tf32", "allow_fp16_reduced_precision_reduction",
                 "allow_bf16_reduced_precision_reduction", "set_float32_matmul_precision", "autocast"}  # fmt: skip


@dataclass(frozen=True)
class Hit:
    detector: str
    evidence: str


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def check_source(source: str, filename: str, forbidden_calls: list[str]) -> list[Hit]:
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        return [Hit("syntax_error", f"{filename}:{exc.lineno}: {exc.msg}")]
    hits: list[Hit] = []
    forbidden = set(forbidden_calls)

    def hit(detector: str, node: ast.AST, what: str) -> None:
        hits.append(Hit(detector, f"{filename}:{getattr(node, 'lineno', '?')}: {what}"))

    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in LAZY_ATTRS:
            hit("lazy_output", node, f"defines {node.name}")
        if isinstance(node, ast.Try | ast.TryStar):
            hit("try_except_fallback", node, "try/except (a fallback path can hide the reference)")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            mods = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
            for mod in mods:
                root = mod.split(".")[0]
                if root in THREAD_MODULES:
                    hit("side_stream_or_thread", node, f"imports {mod}")
                if root in {"gc", "inspect", "ctypes", "builtins"}:
                    hit("timer_tampering", node, f"imports {mod} (reaches the harness)")
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if a.name in forbidden:
                        hit("reference_library_call", node, f"imports {a.name}")
                    if a.name == "suppress":
                        hit("try_except_fallback", node, "contextlib.suppress")
        elif isinstance(node, ast.Call):
            name = _name(node.func)
            if name in forbidden:
                hit("reference_library_call", node, f"calls {name}")
            if name in {
                "setattr",
                "delattr",
                "__import__",
                "import_module",
                "exec",
                "eval",
                "compile",
            }:
                hit("timer_tampering", node, f"calls {name} (can patch timers or load hidden code)")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value in forbidden
        ):
            hit("reference_library_call", node, f"names {node.value!r}")
        if isinstance(node, ast.Attribute | ast.Name):
            name = _name(node)
            if name in GRAPH_ATTRS and isinstance(node, ast.Attribute):
                hit("cuda_graph_replay", node, f"uses {name}")
            elif name in THREAD_ATTRS and isinstance(node, ast.Attribute):
                hit("side_stream_or_thread", node, f"uses {name}")
            elif name in TIMER_ATTRS:
                hit("timer_tampering", node, f"touches {name}")
            elif name in INTROSPECTION:
                hit("timer_tampering", node, f"introspects {name}")
            elif name in LAZY_ATTRS:
                hit("lazy_output", node, f"uses {name}")
            elif name in LOW_PRECISION and isinstance(node, ast.Attribute):
                hit("lowered_precision", node, f"uses {name}")
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name | ast.Attribute):
                    owner = _name(t.value)
                    if owner in {"time", "torch", "cuda", "Event", "Tensor", "sys", "os"}:
                        hit("timer_tampering", t, f"assigns {owner}.{t.attr}")
    return hits
