"""The Python (CuPy) launcher's text of a launch plan (launch.py's
`LaunchPlan` inherits it): docstrings, signatures, the validation call,
the arrays of a call and the messages it raises, laid out by layout.py.
"""

from __future__ import annotations

import textwrap

from gemmgen.backends.cuda.args import Check
from gemmgen.backends.cuda.layout import COLUMNS, PROSE, prose, py_call, py_collection, py_tuple


class PyLaunchText:
    """The Python launcher's text; a mixin of LaunchPlan, whose fields and
    properties (name, args, arrays, inputs, outputs, has_paths, summary,
    paths_words, sms_words, py_shape_message) it reads."""

    __slots__ = ()

    @property
    def py_launches_doc(self) -> str:
        """launches()'s docstring."""
        if not self.has_paths:
            return ('    """The launch sequence for validated dims (empty when there is no work).\n'
                    "    Raises ValueError when a launch is over CUDA's grid or block limits.\"\"\"")
        return ('    """The launch sequence for validated dims (empty when there is no work) on\n'
                "    a device of compute capability `sm` (major * 10 + minor) with `num_sms`\n"
                + prose(f"SMs: on {self.paths_words()}, else (and with sm = 0) the mma.sync path. "
                        "Raises ValueError when a launch is over CUDA's grid or block limits."
                        '"""', "    ", width=PROSE - 1))

    @property
    def py_device_sm_doc(self) -> str:
        """device_sm()'s docstring."""
        sms = self.sms_words("path")
        return prose("\"\"\"The current device's compute capability (major * 10 + minor) and SM "
                     "count: what the module is compiled for"
                     + ("; they pick the path" if self.has_paths else "")
                     + (f" and size the {sms} persistent grid" if sms else "") + '."""', "    ")

    @property
    def py_outputs(self) -> str:
        return py_tuple([f'"{a.name}"' for a in self.outputs])

    @property
    def py_may_be_none(self) -> str:
        return py_tuple([f'"{a.name}"' for a in self.arrays if a.may_be_none])

    @property
    def py_signature(self) -> str:
        """`def <name>(inputs, *, outputs=None, workspace=None, stream=None):`."""
        params = [f"{a.name}=None" if a.optional else a.name for a in self.inputs]
        params += ["*"] + [f"{a.name}=None" for a in self.outputs] + ["workspace=None", "stream=None"]
        return py_call(f"def {self.name}(", params, "):", 0)

    @property
    def py_validate_signature(self) -> str:
        params = ["*"] + [f"{a.name}=None" if a.optional else a.name for a in self.inputs]
        params += [f"{a.name}=None" for a in self.outputs]
        return py_call("def validate(", params, ") -> dict[str, int]:", 0)

    def py_validate(self, indent: int, lhs: str) -> str:
        """`<lhs>validate(lhs=lhs, ...)` at `indent`."""
        return py_call(f"{lhs}validate(", [f"{a.name}={a.name}" for a in self.args], ")", indent)

    @property
    def py_prepare_call(self) -> str:
        """The arrays of a call by name, the workspace last, for _prepare."""
        names = [a.name for a in self.arrays] + ["workspace"]
        return py_collection("named = {", [f'"{n}": {n}' for n in names], "}", 8)

    @property
    def py_launch_arrays(self) -> str:
        """The arrays of a call in DTYPES order, then the workspace."""
        names = [a.name for a in self.arrays] + ["workspace"]
        return py_collection("arrays = (", names, ")", 4)

    def py_raise(self, message: str, indent: int) -> str:
        """`raise ValueError(f"{NAME}: <message> (m={m}, ...)")`."""
        text = f'f"{{NAME}}: {message} ({self.py_shape_message})"'
        return py_call("raise ValueError(", [text], ")", indent)

    def py_check(self, check: Check) -> str:
        return py_call("if not (", [check.cond.py], "):", 4)

    @property
    def py_summary(self) -> str:
        return textwrap.fill(self.summary, COLUMNS - 4, initial_indent="    ",
                             subsequent_indent="    ", break_long_words=False,
                             break_on_hyphens=False)
