"""The tgmm core (op tgmm, and d rhs of a grouped kernel's `<name>_vjp`),
and which kernels get `<name>_vjp`."""

from __future__ import annotations

from dataclasses import dataclass

from gemmgen import ir
from gemmgen.backends.pallas.dtypes import cast, jnp_name, mxu_dtype
from gemmgen.ir import DType, Op


@dataclass(frozen=True, slots=True, kw_only=True)
class TgmmCore:
    """The ragged-K matmul: out[i] = alpha * lhs[rows_i]ᵀ @ rhs[rows_i] (+ existing_out)."""

    fn: str
    kernel_fn: str
    lhs_cast: DType | None
    rhs_cast: DType | None
    highest: bool
    alpha: float | None

    @property
    def lhs_convert(self) -> str:
        return f".astype(jnp.{jnp_name(self.lhs_cast)})" if self.lhs_cast else ""

    @property
    def rhs_convert(self) -> str:
        return f".astype(jnp.{jnp_name(self.rhs_cast)})" if self.rhs_cast else ""


def vjp_supported(kernel: ir.Kernel) -> bool:
    """Grouped kernels with f32/bf16 operands and no scales get `<name>_vjp`."""
    return (kernel.op is Op.GROUPED and not kernel.masked
            and kernel.lhs.dtype in (DType.F32, DType.BF16)
            and kernel.rhs_operand.dtype in (DType.F32, DType.BF16)
            and not kernel.lhs_scale.enabled and not kernel.rhs_scale.enabled)


def tgmm_core(lhs: DType, rhs: DType, alpha: float | None) -> TgmmCore:
    mxu = mxu_dtype(lhs, rhs)
    return TgmmCore(fn="_tgmm", kernel_fn="_tgmm_kernel", lhs_cast=cast(lhs, mxu),
                    rhs_cast=cast(rhs, mxu), highest=mxu is DType.F32, alpha=alpha)
