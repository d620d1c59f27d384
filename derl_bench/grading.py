"""Answer extraction and grading for GSM8K and MATH.

GSM8K answers are numbers: :func:`extract_gsm8k_answer` finds the *last* answer marker
(``#### n``, ``\\boxed{n}``, "the answer is n"), else the last number in the text, and
:func:`gsm8k_equal` compares numerically after dropping ``,`` ``$`` ``%`` and a trailing ``.``::

    >>> extract_gsm8k_answer("3 + 4 = 7. The answer is $1,234.")
    '1234'
    >>> gsm8k_equal("1234.0", "1234")
    True

MATH answers are LaTeX: the reference is the last ``\\boxed{}`` (or ``\\fbox{}``) of the
solution, found with brace matching, and equivalence is decided by a cheap normalised string
comparison first, then by math-verify in a worker process (:class:`MathVerifier`) whose
timeout works from any thread and survives pathological input::

    >>> last_boxed("so $\\\\boxed{\\\\frac{1}{2}}$ and not \\\\boxed{3}")
    '3'
    >>> normalize_latex("\\\\left( 3, \\\\dfrac{\\\\pi}{2} \\\\right)")
    '(3,\\\\frac{\\\\pi}{2})'
"""

from __future__ import annotations

import json
import re
import select
import subprocess
import sys
import threading
from dataclasses import dataclass

# ----------------------------------------------------------------------------- GSM8K

_NUMBER = r"-?\$?\s*\d[\d,]*(?:\.\d+)?|-?\$?\s*\.\d+"
_MARKERS = [
    re.compile(r"####\s*(" + _NUMBER + r")"),
    re.compile(r"\\boxed\s*\{\s*\\?\$?\s*(" + _NUMBER + r")\s*\\?%?\s*\}"),
    re.compile(r"answer\s*(?:is|:|=)\s*:?\s*\**\s*(" + _NUMBER + r")", re.IGNORECASE),
]
_ANY_NUMBER = re.compile(_NUMBER)


def _clean_number(text: str) -> str:
    text = text.replace(",", "").replace("$", "").replace("%", "").replace(" ", "").strip()
    return text.rstrip(".")


def extract_gsm8k_answer(text: str) -> str | None:
    """The final numeric answer of a response, or ``None`` when it has no number.

    Among all answer markers the one that ends last wins (a response that restates the
    question's numbers after "the answer is" must not be graded by an earlier marker).
    """
    best: tuple[int, str] | None = None
    for pattern in _MARKERS:
        for match in pattern.finditer(text):
            if best is None or match.end() > best[0]:
                best = (match.end(), match.group(1))
    if best is not None:
        return _clean_number(best[1])
    numbers = _ANY_NUMBER.findall(text)
    return _clean_number(numbers[-1]) if numbers else None


def gsm8k_reference(answer_field: str) -> str:
    """The reference number of a GSM8K ``answer`` field (the text after ``####``)."""
    return _clean_number(answer_field.rsplit("####", 1)[-1])


def gsm8k_equal(predicted: str | None, reference: str) -> bool:
    """Numeric equality of two cleaned GSM8K answers (``18.00`` equals ``18``)."""
    if predicted is None:
        return False
    try:
        return abs(float(predicted) - float(reference)) <= 1e-6 * max(1.0, abs(float(reference)))
    except ValueError:
        return predicted == reference


# ----------------------------------------------------------------------------- MATH

_BOX_OPENERS = re.compile(r"\\(?:boxed|fbox)\s*(\{)|\\boxed\s+(?=[^\s{])")
_BARE_ARGUMENT = re.compile(r"[^\s$]*")  # "\boxed 5": the argument runs to the next space or $
_BRACES = re.compile(r"(?<!\\)[{}]")  # an unescaped brace


def all_boxed(text: str) -> list[str]:
    """Contents of every ``\\boxed{...}`` / ``\\fbox{...}`` (and ``\\boxed x``), in order.

    One pass over ``text`` (linear in its length, however many boxes are left open): a box
    closes at the first brace that brings the nesting back to where the box opened.

        >>> all_boxed("\\\\boxed{a\\\\boxed{b}} \\\\fbox{c} \\\\boxed{open")
        ['a\\\\boxed{b}', 'b', 'c']
    """
    found: list[tuple[int, str]] = []
    openers = iter(_BOX_OPENERS.finditer(text))
    opener = next(openers, None)
    if opener is None:
        return []
    open_boxes: list[tuple[int, int]] = []  # (position of its "{", depth before it)
    depth = 0
    # Only depth relative to a box's own "{" matters, so braces before the first box are skipped.
    for brace in _BRACES.finditer(text, opener.start()):
        at = brace.start()
        while opener is not None and opener.start() < at and (
                opener.group(1) is None or opener.start(1) <= at):
            if opener.group(1) is None:
                found.append((opener.start(), _bare_argument(text, opener.end())))
            elif opener.start(1) == at:
                open_boxes.append((at, depth))
            opener = next(openers, None)
        if brace.group() == "{":
            depth += 1
        else:
            depth -= 1
            if open_boxes and open_boxes[-1][1] == depth:
                start, _ = open_boxes.pop()
                found.append((start, text[start + 1 : at]))
    while opener is not None:  # bare openers after the last brace
        if opener.group(1) is None:
            found.append((opener.start(), _bare_argument(text, opener.end())))
        opener = next(openers, None)
    found.sort(key=lambda item: item[0])
    return [content for _, content in found]


def _bare_argument(text: str, at: int) -> str:
    match = _BARE_ARGUMENT.match(text, at)
    return match.group() if match else ""


def last_boxed(text: str) -> str | None:
    """Content of the last balanced ``\\boxed{}`` or ``\\fbox{}`` of ``text``."""
    boxes = all_boxed(text)
    return boxes[-1] if boxes else None


_NORMALIZE_SUBS = [
    (re.compile(r"\\(?:left|right|big|Big|bigg|Bigg)(?![a-zA-Z])"), ""),
    (re.compile(r"\\[,!;: ]"), ""),
    (re.compile(r"\\(?:d|t)frac"), r"\\frac"),
    (re.compile(r"\^\s*\{?\\circ\}?"), ""),
    (re.compile(r"\\(?:text|textbf|mathrm|mbox)\{\s*\}"), ""),
    (re.compile(r"\\%|%"), ""),
    (re.compile(r"\\\$|\$"), ""),
    (re.compile(r"\s+"), ""),
]


def normalize_latex(text: str) -> str:
    """A conservative normal form: two answers with equal forms are certainly equal."""
    for pattern, repl in _NORMALIZE_SUBS:
        text = pattern.sub(repl, text)
    return text.rstrip(".").strip()


def _serve_verifier() -> None:  # the worker process: one JSON request per line on stdin
    from math_verify import parse, verify

    for line in sys.stdin:
        try:
            gold, pred = json.loads(line)
            # math-verify's own timeouts use signal.alarm; the parent enforces ours instead.
            ok = bool(verify(parse(f"${gold}$", parsing_timeout=None),
                             parse(f"${pred}$", parsing_timeout=None), timeout_seconds=None))
        except Exception:  # any parser failure means "not shown equal"
            ok = False
        sys.stdout.write("1\n" if ok else "0\n")
        sys.stdout.flush()


class MathVerifier:
    """math-verify in a worker process, with a per-call timeout that works from any thread.

    The worker is a plain subprocess (``python -m derl_bench.grading``), so it works the same
    from scripts, notebooks, threads and forked or spawned workers. A call that outlives
    ``timeout`` kills the worker (a new one starts on the next call) and counts as not equal,
    so one pathological answer can never hang a grader or a trainer.

        >>> verifier = MathVerifier(timeout=30.0)
        >>> verifier.equal("\\\\frac{1}{2}", "0.5")
        True
        >>> verifier.close()
    """

    # A new worker first imports sympy and antlr; that is waited for apart from the timeout.
    STARTUP_GRACE = 60.0

    def __init__(self, timeout: float = 5.0) -> None:
        self.timeout = timeout
        self.timeouts = 0  # calls that ran out of time or lost their worker
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "derl_bench.grading"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )
        if self._ask(b'["1", "1"]\n', self.STARTUP_GRACE) is None:
            self._stop()
            raise RuntimeError(
                "the math-verify worker did not start (python -m derl_bench.grading)")

    def _ask(self, request: bytes, wait: float) -> bool | None:
        """Send one request; the answer, or ``None`` when the worker died or ran out of time."""
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(request)
            proc.stdin.flush()
        except OSError:
            return None
        ready, _, _ = select.select([proc.stdout], [], [], wait)
        if not ready:
            return None
        answer = proc.stdout.readline()
        return answer.strip() == b"1" if answer else None

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
        if proc is not None:
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()

    def equal(self, gold: str, predicted: str) -> bool:
        """Whether math-verify shows ``predicted`` equivalent to ``gold`` within the timeout."""
        request = (json.dumps([gold, predicted]) + "\n").encode("utf-8", errors="replace")
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            answer = self._ask(request, self.timeout)
            if answer is None:
                self.timeouts += 1
                self._stop()
                return False
            return answer

    def close(self) -> None:
        """Stop the worker process."""
        with self._lock:
            self._stop()

    def __del__(self) -> None:
        try:
            self._stop()
        except Exception:
            pass


_SHARED_VERIFIER: MathVerifier | None = None
_SHARED_LOCK = threading.Lock()


def shared_verifier() -> MathVerifier:
    """The process-wide :class:`MathVerifier` that math envs share."""
    global _SHARED_VERIFIER
    with _SHARED_LOCK:
        if _SHARED_VERIFIER is None:
            _SHARED_VERIFIER = MathVerifier()
        return _SHARED_VERIFIER


@dataclass(frozen=True)
class Grade:
    """The outcome of grading one response."""

    correct: bool
    extracted: str | None
    timed_out: bool = False


# math-verify parses answers of any size with sympy; longer ones are never reference-like.
MAX_VERIFY_CHARS = 1000


def grade_math(response: str, reference: str, verifier: MathVerifier | None = None) -> Grade:
    """Grade a MATH response against a reference answer (the reference's boxed content)."""
    extracted = last_boxed(response)
    if extracted is None:
        return Grade(False, None)
    if normalize_latex(extracted) == normalize_latex(reference):
        return Grade(True, extracted)
    if len(extracted) > MAX_VERIFY_CHARS:
        return Grade(False, extracted)
    verifier = verifier or shared_verifier()
    before = verifier.timeouts
    ok = verifier.equal(reference, extracted)
    return Grade(ok, extracted, timed_out=verifier.timeouts > before)


def grade_gsm8k(response: str, reference: str) -> Grade:
    """Grade a GSM8K response against the reference number."""
    extracted = extract_gsm8k_answer(response)
    return Grade(gsm8k_equal(extracted, reference), extracted)


if __name__ == "__main__":
    _serve_verifier()
