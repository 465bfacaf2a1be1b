"""The policy gate: Kyverno `ValidatingPolicy` files evaluated with CEL, failing closed.

Pure (no Django). A policy set is a directory of ValidatingPolicy YAML files, loaded by
`portal/policy_files.py` (whose names this module re-exports). Each file is evaluated exactly
as written:
`spec.matchConstraints.resourceRules` pick the objects, `spec.matchConditions` must all hold,
`spec.variables` are evaluated in order into `variables`, and every
`spec.validations[].expression` must return the boolean true.

Fail closed: a missing or empty policy set, a file that does not parse, a
compile error, a runtime error (missing field, unknown function), a non-boolean
result or running past the deadline is a denial with outcome "missing",
"error" or "timeout". `failurePolicy: Ignore` is not honoured: the portal
never admits what it could not check. Validations whose `validationActions`
hold no `Deny` (Audit or Warn only) are recorded but do not deny.

The CEL runner and its repairs for cel-python (`has()`, `filter()`) stay beside the gate that
fails closed on them: the engine test swaps this module's runner for the reference interpreter
and must swap exactly what the gate evaluates with.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import celpy

from portal.policy_files import (
    ALLOW,
    DENY,
    ERROR,
    MISSING,
    POLICY_API_GROUP,
    POLICY_KIND,
    TIMEOUT,
    Evaluation,
    PolicyFile,
    PolicySet,
    PolicySetMissing,
    Verdict,
    load_policy_set,
    matches,
    metadata_of,
    resource_of,
)

# cel-python 0.5.0's transpiler makes `has(x)` a Python bool, which `&&`, `||` and `!` refuse.
_HAS = re.compile(
    r"not isinstance\(celpy\.evaluation\.result\(activation, ex_\d+_h\), CELEvalError\)"
)
# The transpiled code runs with the activation in module globals of celpy.evaluation.
_eval_lock = threading.Lock()


# Its `filter()` keeps the elements whose predicate is true and silently drops those whose
# predicate fails (`bool()` of the error is false), where CEL, and Kubernetes' CEL, make the
# whole filter an error: a NodePool requirement without a `key` passed a policy that filters
# requirements by key, instead of failing it closed.
_FILTER = "celpy.evaluation.macro_filter("
_STRICT_FILTER = "_kiln_strict_filter"


def _strict_filter(activation, bind_variable, cel_expr, cel_gen):
    """CEL's `filter()`: an error or a non-boolean from the predicate is the result (fails closed)."""
    kept = []
    for value in cel_gen(activation):
        verdict = celpy.evaluation.result(
            activation.nested_activation(vars={bind_variable: value}), cel_expr
        )
        if isinstance(verdict, celpy.CELEvalError):
            return verdict
        if not _is_bool(verdict):
            return celpy.CELEvalError("no such overload", TypeError, ())
        if verdict:
            kept.append(value)
    return celpy.celtypes.ListType(kept)


class _TranspiledRunner(celpy.CompiledRunner):
    """cel-python's transpiling runner: each expression becomes Python code once, which evaluates
    several times faster than the tree-walking interpreter. Three repairs for the pinned 0.5.0:
    `has()` yields a CEL bool, `filter()` fails on a failing predicate (`_strict_filter`), and
    evaluations are serialised, because the generated code reads its activation from module
    globals (celpy.evaluation's, where `_strict_filter` is put under its own name). A test
    checks it agrees with the interpreter on every policy file, on objects damaged at random."""

    def __init__(self, environment, ast, functions=None) -> None:
        super().__init__(environment, ast, functions)
        source = _HAS.sub(r"celpy.celtypes.BoolType(\g<0>)", self.tp.source_text)
        source = source.replace(_FILTER, f"{_STRICT_FILTER}(")
        if source != self.tp.source_text:
            self.tp.source_text = source
            self.tp.executable_code = compile(source, "<cel>", "exec")

    def evaluate(self, context):
        with _eval_lock:
            celpy.evaluation.result.__globals__[_STRICT_FILTER] = _strict_filter
            return super().evaluate(context)


_compiled: dict[str, Any] = {}
_compile_lock = threading.Lock()
# Built at the first compilation, not at import: it builds cel-python's Lark parser, which
# every process that imports the portal paid, most without a policy to read.
_env: celpy.Environment | None = None


def _program(expression: str) -> Any:
    """Compile once per distinct expression text (compilation is the slow part of cel-python)."""
    program = _compiled.get(expression)
    if program is None:
        with _compile_lock:
            program = _compiled.get(expression)
            if program is None:
                global _env
                if _env is None:
                    _env = celpy.Environment(runner_class=_TranspiledRunner)
                program = _env.program(_env.compile(expression))
                _compiled[expression] = program
    return program


def _eval(expression: str, activation: dict[str, Any]) -> Any:
    return _program(expression).evaluate(activation)


def _is_bool(value: Any) -> bool:
    return isinstance(value, celpy.celtypes.BoolType | bool)


def _describe(obj: dict[str, Any]) -> str:
    meta = metadata_of(obj)
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind', '?')} {where}{meta.get('name', '?')}"


def _short(exc: BaseException) -> str:
    text = str(exc.args[0]) if getattr(exc, "args", None) else str(exc)
    return text[:300]


def evaluate_policy(
    pf: PolicyFile,
    obj: dict[str, Any] | None,
    context: dict[str, Any],
    cel_object: Any = None,
    *,
    old: dict[str, Any] | None = None,
) -> Verdict | None:
    """Evaluate one policy file on one object; None when the policy does not select the object.

    `cel_object` is `obj` already converted with `celpy.json_to_cel`, when the caller evaluates
    several policies on the same object and converts it once. As at admission, `old` is the
    live object of an UPDATE or DELETE (CEL `oldObject`), and a DELETE has no `object` (null):
    the rules match on whichever of the two is there.
    """
    subject = obj if obj is not None else (old or {})
    target = _describe(subject)
    if pf.doc is None:
        return Verdict(pf.name, pf.sha256, target, False, ERROR, pf.load_error)
    operation = context.get("operation", "CREATE")
    if not matches(pf.doc, subject, operation):
        return None
    spec = pf.doc["spec"]
    enforce = "Deny" in (spec.get("validationActions") or ["Deny"])
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(obj) if cel_object is None else cel_object,
        "oldObject": celpy.json_to_cel(old),
        "request": celpy.json_to_cel(
            {
                "operation": operation,
                "userInfo": context.get("userInfo", {}),
                "namespace": metadata_of(subject).get("namespace", ""),
                "name": metadata_of(subject).get("name", ""),
            }
        ),
    }
    try:
        for condition in spec.get("matchConditions") or []:
            result = _eval(condition["expression"], activation)
            if not _is_bool(result):
                raise TypeError(f"matchCondition {condition.get('name')} is not a boolean")
            if not result:
                return None
        variables: dict[str, Any] = {}
        for variable in spec.get("variables") or []:
            activation["variables"] = celpy.celtypes.MapType(
                {celpy.celtypes.StringType(k): v for k, v in variables.items()}
            )
            variables[variable["name"]] = _eval(variable["expression"], activation)
        activation["variables"] = celpy.celtypes.MapType(
            {celpy.celtypes.StringType(k): v for k, v in variables.items()}
        )
        for validation in spec["validations"]:
            result = _eval(validation["expression"], activation)
            if isinstance(result, celpy.CELEvalError):
                raise result
            if not _is_bool(result):
                raise TypeError(f"validation returned {type(result).__name__}, not a boolean")
            if not result:
                message = validation.get("message") or f"failed: {validation['expression']}"
                if validation.get("messageExpression"):
                    rendered = _eval(validation["messageExpression"], activation)
                    if isinstance(rendered, str):
                        message = str(rendered)
                return Verdict(pf.name, pf.sha256, target, not enforce, DENY, message)
    except Exception as exc:  # noqa: BLE001 - fail closed: any evaluation failure denies
        return Verdict(pf.name, pf.sha256, target, False, ERROR, f"evaluation error: {_short(exc)}")
    return Verdict(pf.name, pf.sha256, target, True, ALLOW, "")


def evaluate(
    policy_set: PolicySet,
    objects: Iterable[dict[str, Any]],
    *,
    context: dict[str, Any] | None = None,
    timeout_seconds: float = 2.0,
) -> Evaluation:
    """Evaluate every policy on every object within `timeout_seconds`; running late denies everything."""
    objects = list(objects)
    context = context or {}
    done: Future[list[Verdict]] = Future()

    def run() -> None:
        try:
            verdicts = []
            for obj in objects:
                cel_object = celpy.json_to_cel(obj)
                for pf in policy_set.files:
                    verdict = evaluate_policy(pf, obj, context, cel_object)
                    if verdict is not None:
                        verdicts.append(verdict)
            done.set_result(verdicts)
        except BaseException as exc:  # noqa: BLE001 - reported to the waiting caller below
            done.set_exception(exc)

    # A daemon thread: CEL evaluation cannot be interrupted, so a late one is abandoned, not awaited.
    threading.Thread(target=run, name="policy-eval", daemon=True).start()
    evaluation = Evaluation(policy_set.name, policy_set.version)
    try:
        verdicts = done.result(timeout=timeout_seconds)
    except TimeoutError:
        evaluation.verdicts = [
            Verdict(
                pf.name,
                pf.sha256,
                "*",
                False,
                TIMEOUT,
                f"evaluation did not finish within {timeout_seconds}s",
            )
            for pf in policy_set.files
        ]
        return evaluation
    except Exception as exc:  # noqa: BLE001 - fail closed
        evaluation.verdicts = [Verdict(policy_set.name, "", "*", False, ERROR, _short(exc))]
        return evaluation
    if not verdicts:
        # Nothing matched: still a decision on record, and an allowed one.
        verdicts = [
            Verdict(policy_set.name, "", "*", True, ALLOW, "no policy selects these objects")
        ]
    evaluation.verdicts = verdicts
    return evaluation


@dataclass(frozen=True)
class AdmissionRequest:
    """One write as an admission controller sees it: CREATE (object), UPDATE (object and the
    live oldObject) or DELETE (oldObject only), by one user."""

    operation: str
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None
    user_info: dict[str, Any]


def admit(policy_set: PolicySet, request: AdmissionRequest) -> list[Verdict]:
    """Every policy's verdict on one admission request (the policies that select it), as the
    cluster's admission controller evaluates the same files."""
    context = {"operation": request.operation, "userInfo": request.user_info}
    verdicts = []
    for pf in policy_set.files:
        verdict = evaluate_policy(pf, request.object, context, old=request.old_object)
        if verdict is not None:
            verdicts.append(verdict)
    return verdicts


def missing(name: str, reason: str) -> Evaluation:
    """The denial recorded when a policy set cannot be found."""
    return Evaluation(name, "", [Verdict(name, "", "*", False, MISSING, reason)])


__all__ = [
    "ALLOW",
    "DENY",
    "ERROR",
    "MISSING",
    "POLICY_API_GROUP",
    "POLICY_KIND",
    "TIMEOUT",
    "AdmissionRequest",
    "Evaluation",
    "PolicyFile",
    "PolicySet",
    "PolicySetMissing",
    "Verdict",
    "admit",
    "evaluate",
    "evaluate_policy",
    "load_policy_set",
    "matches",
    "missing",
    "resource_of",
]
