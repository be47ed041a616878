"""Building kernels outside the server lock.

A plan that needs a kernel nobody has built yet raises NeedsCompile before it changes
anything. The client catches it, releases the lock, runs the job (codegen and the
OpenCL build, which take tens to hundreds of milliseconds), takes the lock again and
resumes. Meanwhile other threads register, launch and read.
"""

from __future__ import annotations

from .codegen import elementwise as cg
from .codegen import gather as gg
from .codegen import matmul as mg
from .codegen import panels as pg
from .codegen import reduce as rg
from .codegen import scan as scn
from .codegen import search as sc
from .codegen import sort as sg
from .codegen import stencil as stg
from .codegen import transpose as tg
from .errors import kept
from .runtime.programs import ProgramCache

# float32 division and sqrt rounded like numpy's (some drivers default to a few ulp off).
BUILD_OPTIONS = ("-cl-fp32-correctly-rounded-divide-sqrt",)


def _generator(spec):
    """The codegen module that turns `spec` into source."""
    for module, kind in ((rg, rg.ReduceSpec), (mg, mg.MatmulSpec), (sg, sg.SortSpec), (gg, gg.MoveSpec),
                         (sc, sc.SearchSpec), (scn, scn.ScanSpec), (stg, stg.StencilSpec), (tg, tg.TransposeSpec),
                         (pg, pg.PanelSpec)):
        if isinstance(spec, kind):
            return module
    return cg


class CompileJob:
    """Generate and build the kernel of one specialization key; safe without the lock.

    With `fallback`, a vector kernel whose build fails (a driver that rejects or cannot
    compile some vector code) is built as its family's scalar variant instead."""

    def __init__(self, programs: ProgramCache, spec: cg.KernelSpec, fallback: bool = True):
        self.programs = programs
        self.spec = spec
        self.fallback = fallback

    def run(self) -> None:
        """Build; a failure is kept by the cache and fails the block when it resumes."""
        spec = self.spec
        gen = _generator(spec)
        scalar = gen.scalar_variant(spec) if self.fallback else None
        try:
            self.programs.build_once(spec, gen.generate, BUILD_OPTIONS, gen.arg_dtypes, scalar)
        except Exception as exc:
            self.programs.failed[spec] = kept(exc)  # (kept for good: without its traceback)


def trial_build(programs: ProgramCache, spec) -> str:
    """Build `spec` once through the program cache, without a scalar fallback: '' if it
    builds, else the driver's reason. Safe without the server lock."""
    CompileJob(programs, spec, fallback=False).run()
    failure = programs.failed.get(spec)
    return "" if failure is None else str(failure)


class NeedsCompile(Exception):  # noqa: N818  (a signal, not an error)
    """Raised under the lock when a block needs a kernel that is not built yet."""

    def __init__(self, job: CompileJob):
        super().__init__("a kernel needs a build")
        self.job = job
