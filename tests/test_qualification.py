"""Device qualification: canaries in child processes pick each element size's vector width;
faults (a child that aborts, hangs, builds nothing or computes wrong values) narrow the
width and the parent carries on; verdicts are cached; builds that fail fall back to
scalar code; a broken driver cache entry is rebuilt fresh."""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil
import subprocess
import uuid
import warnings

import numpy as np
import pyopencl as cl
import pytest

import clients
from fusion_server import qualification
from fusion_server.errors import DeviceError
from fusion_server.qualification import runner
from fusion_server.qualification import verdict as verdicts
from fusion_server.qualification.ranking import choose, rank
from fusion_server.qualification.verdict import UNKNOWN_CPU, Failure, Verdict
from fusion_server.runtime import device as device_mod
from fusion_server.runtime import programs
from fusion_server.runtime.programs import KernelBuildError, build_kernel
from fusion_server.runtime.widths import VectorWidths
from tests.conftest import failing_builds, rand, run_python, server_settings

SIZES = (1, 2, 4, 8)


@pytest.fixture
def info():
    return clients.default_device().info


def _widest(info) -> int:
    return runner.candidates(info.vector_width)[0]


@pytest.mark.timeout(600)
def test_injected_faults_narrow_the_width_and_the_parent_carries_on(info):
    """An abort, a wrong value and a failed build at the widest width each disqualify it
    for their element size; the verdict says which canary failed and how."""
    if info.vector_width < 2:
        pytest.skip("the device prefers scalar code: there is no width to narrow")
    w = _widest(info)
    faults = {f"4x{w}/elementwise-int32": "abort", f"8x{w}/elementwise-int64": "wrong",
              f"1x{w}/elementwise-bool": "build"}
    verdict = runner.qualify(info, faults=faults)
    found = {(f.job, f.canary): f for f in verdict.failures}
    abort = found[(f"4-byte x {w}", "elementwise-int32")]
    assert abort.how == "crash" and "SIGABRT" in abort.detail
    wrong = found[(f"8-byte x {w}", "elementwise-int64")]
    assert wrong.how == "wrong" and "elements right" in wrong.detail
    build = found[(f"1-byte x {w}", "elementwise-bool")]
    assert build.how == "build" and "injected build failure" in build.detail
    for size in (1, 4, 8):
        assert verdict.widths[size] < w
    assert verdict.common_ok and verdict.usable
    assert verdict.children >= 2  # the aborted child was replaced
    # This process is untouched and computes as before.
    np.testing.assert_allclose((clients.asarray(rand(64)) * 2.0).numpy(), rand(64) * 2, rtol=1e-6)


@pytest.mark.timeout(600)
def test_a_block_over_two_sizes_that_fails_narrows_the_width_that_set_its_own(info):
    """After each size is decided alone, blocks over two sizes run at the narrower one's
    width; one that fails halves that width (only that one), and the blocks run again."""
    real = qualification.verdict_for(info)
    if any(f.job.startswith("mixed") for f in real.failures):
        pytest.skip("mixed blocks narrowed this device already: its widths alone are not known here")
    alone = real.widths
    w4, w8 = alone[4], alone[8]
    if min(w4, w8) < 2:
        pytest.skip("scalar code: nothing to narrow")
    first = "mixed@" + ".".join(str(alone[s]) for s in SIZES)
    verdict = runner.qualify(info, faults={f"{first}/casts-4-8-byte-int32": "wrong"})
    narrowed = dict(alone)
    for s in (1, 4, 8):  # the canary's block touches bools, 4- and 8-byte elements
        if alone[s] == min(alone[1], w4, w8):
            narrowed[s] = alone[s] // 2
    assert verdict.widths == narrowed
    (failure,) = [f for f in verdict.failures if f.job.startswith("mixed")]
    assert failure.canary == "casts-4-8-byte-int32" and failure.how == "wrong"
    assert verdict.usable


@pytest.mark.timeout(600)
def test_a_hanging_canary_is_killed_at_the_timeout(info):
    w = _widest(info) if info.vector_width > 1 else 1
    verdict = runner.qualify(info, faults={f"2x{w}/elementwise-int16": "hang", "common/gather-float32": "hang"},
                             timeout=15)
    found = {(f.job, f.canary): f.how for f in verdict.failures}
    assert found[("common", "gather-float32")] == "hang"
    assert not verdict.common_ok and not verdict.usable
    if w > 1:
        assert found[(f"2-byte x {w}", "elementwise-int16")] == "hang"
        assert verdict.widths[2] < w


@pytest.mark.timeout(600)
def test_scalar_code_that_fails_makes_the_device_unusable(info):
    """When every width of an element size fails, scalar code is checked; failing that
    too, the verdict says the device is not usable (it is never chosen by default)."""
    faults = {f"8x{w}/elementwise-int64": "wrong" for w in [*runner.candidates(info.vector_width), 1]}
    verdict = runner.qualify(info, faults=faults)
    assert verdict.widths[8] == 1 and not verdict.scalar_ok and not verdict.usable
    assert any(f.job == "8-byte x 1" for f in verdict.failures)
    assert "NOT USABLE" in "\n".join(verdict.lines())


@pytest.mark.timeout(600)
def test_the_verdict_is_cached_and_a_second_run_starts_no_child(info, tmp_path, monkeypatch):
    monkeypatch.setenv("FUSION_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(qualification, "_verdicts", {})
    started = []
    real_popen = subprocess.Popen

    def counting(*args, **kwargs):
        started.append(args)
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(runner.subprocess, "Popen", counting)
    first = qualification.verdict_for(info)
    assert started and first.qualified
    assert list((tmp_path / "qualification").glob("*.json"))
    started.clear()
    monkeypatch.setattr(qualification, "_verdicts", {})  # as a new process would start
    second = qualification.verdict_for(info)
    assert not started
    assert second.widths == first.widths and second.failures == first.failures
    assert second.measured == first.measured
    # The key holds the driver and the CPU: another CPU gets its own verdict.
    monkeypatch.setattr(verdicts, "cpu_signature", lambda: "another CPU [flags]")
    assert verdicts.load(info) is None


def test_a_verdict_round_trips_through_json():
    v = Verdict("P / D", "1.0", {1: 16, 2: 16, 4: 8, 8: 4}, {s: 16 for s in SIZES},
                [Failure("4-byte x 16", "elementwise-int32", "crash", "killed by SIGABRT")], measured="now")
    back = Verdict.from_json(v.to_json())
    assert back == v
    assert back.vector_widths == VectorWidths(16, 16, 8, 4)
    assert "failed 4-byte x 16: elementwise-int32 crash" in "\n".join(back.lines())


def test_qualification_off_trusts_the_device(info, monkeypatch):
    monkeypatch.setenv("FUSION_QUALIFY", "0")
    monkeypatch.setattr(qualification, "qualify", lambda *a, **k: pytest.fail("qualification ran"))
    v = qualification.verdict_for(info)
    assert not v.qualified and v.widths == {s: info.vector_width for s in SIZES}
    assert qualification.widths_for(info) == VectorWidths.uniform(info.vector_width)


def test_a_forced_width_past_the_qualified_one_warns(info, monkeypatch):
    narrow = Verdict(info.label, "d", {1: 16, 2: 16, 4: 8, 8: 4}, {s: 16 for s in SIZES})
    monkeypatch.setattr(qualification, "verdict_for", lambda i, refresh=False: narrow)
    monkeypatch.setenv("FUSION_VECTOR_WIDTH", "16")
    with pytest.warns(RuntimeWarning, match="past the qualified widths.*4-byte elements qualified at 8"):
        assert qualification.widths_for(info) == VectorWidths.uniform(16)
    monkeypatch.setenv("FUSION_VECTOR_WIDTH", "4")
    assert qualification.widths_for(info) == VectorWidths.uniform(4)  # within: no warning
    monkeypatch.setenv("FUSION_VECTOR_WIDTH", "3")
    with pytest.raises(clients.FusionError, match="FUSION_VECTOR_WIDTH=3"):
        qualification.widths_for(info)
    monkeypatch.delenv("FUSION_VECTOR_WIDTH")
    assert qualification.widths_for(info) == VectorWidths(16, 16, 8, 4)


def test_a_kernel_runs_at_the_narrowest_width_of_its_element_sizes():
    """Widths per element size: a float32 chain at the 4-byte width, an int64 one at the
    8-byte width, a block mixing them at the narrower (counted in work-items)."""
    n = 4096
    a = np.arange(n, dtype=np.float32)
    with server_settings(widths=VectorWidths(16, 16, 8, 4)):
        x, i = clients.asarray(a), clients.asarray(np.arange(n))
        with clients.inspect() as rec:
            f = (x * 2.0 + 1.0).numpy()
            g = (i * 3 - 1).numpy()
            h = (clients.astype(x, np.int64) + i).numpy()
    np.testing.assert_array_equal(f, a * 2 + 1)
    np.testing.assert_array_equal(g, np.arange(n) * 3 - 1)
    np.testing.assert_array_equal(h, a.astype(np.int64) + np.arange(n))
    assert [k.items for k in rec.kernels] == [n // 8, n // 4, n // 4]


# -- builds that fail fall back to scalar code -----------------------------------------------
def _refuse_vectors(programs, marker):
    """A driver that refuses every vector build of sources containing `marker`."""
    def vector(key) -> bool:
        return (getattr(key, "width", 1) if not hasattr(key, "vector_bytes") else key.vector_bytes // 4) > 1

    return failing_builds(programs, marker, when=vector, error=lambda name: KernelBuildError(
        f"OpenCL build of {name} failed:\nerror: injected: no vectors here"))


@pytest.mark.parametrize("family", ["elementwise", "reduce", "matmul"])
def test_a_vector_build_that_fails_is_built_again_as_scalar_code(family, client):
    programs = client.server.runtime.programs
    value = float(uuid.uuid4().int % 1000) + 0.5  # a kernel nobody has built
    marker = f"{value}f"
    op = clients.custom.elementwise(f"scaled_{family}", f"x * {marker}")
    a = rand((48, 64))
    x = clients.asarray(a)
    before = clients.stats()["build_fallbacks"]
    with _refuse_vectors(programs, marker):
        with server_settings(widths=VectorWidths.uniform(4), reduce_strategy="loop", matmul_strategy="rows"):
            with clients.inspect() as rec:
                if family == "elementwise":  # (not op(x) alone: the op's check at definition built that)
                    got, want = (op(x) + 1.0).numpy(), a * np.float32(value) + 1
                elif family == "reduce":
                    got, want = clients.sum(op(x), axis=1).numpy(), (a * np.float32(value)).sum(1)
                else:
                    got, want = op(x @ clients.asarray(a.T)).numpy(), (a @ a.T) * np.float32(value)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    assert clients.stats()["build_fallbacks"] - before == 1
    (record,) = rec.kernels
    assert "injected: no vectors here" in record.fallback
    assert "built as scalar code" in rec.explain()
    if family == "elementwise":
        assert record.items == a.size  # one element per work-item


def test_a_build_that_fails_as_scalar_code_too_fails_its_block_only(client):
    programs = client.server.runtime.programs
    marker = f"{uuid.uuid4().int % 1000}.25f"
    op = clients.custom.elementwise("never_builds", f"x - {marker}")
    with failing_builds(programs, marker, lambda name: KernelBuildError(f"OpenCL build of {name} failed: injected")):
        with server_settings(widths=VectorWidths.uniform(4)):
            y = op(clients.asarray(rand(64))) * 2.0  # (op(x) alone was built by the check at definition)
            with pytest.raises(clients.TensorFailedError, match="injected"):
                y.numpy()
    np.testing.assert_allclose((clients.asarray(rand(8)) + 1.0).numpy(), rand(8) + 1, rtol=1e-6)


# -- a broken driver cache ------------------------------------------------------------------
def test_a_kernel_the_driver_cannot_create_is_built_fresh_once(client, monkeypatch):
    context = client.server.runtime.context
    source = f"__kernel void k_{uuid.uuid4().hex}(__global float* o) {{ o[get_global_id(0)] = 1.0f; }}"
    name = source.split()[2].split("(")[0]
    real = programs.OwnedKernel
    calls = []

    def flaky(program, kname):
        calls.append(kname)
        if len(calls) == 1:  # what PoCL says for a program loaded from a broken cache entry
            raise cl.LogicError("clCreateKernel failed: INVALID_KERNEL_NAME")
        return real(program, kname)

    monkeypatch.setattr(programs, "OwnedKernel", flaky)
    with pytest.warns(RuntimeWarning, match="kernel cache .* Rebuilt it fresh"):
        kernel = build_kernel(context, source, name)
    assert kernel.function_name == name and len(calls) == 2
    calls.clear()
    monkeypatch.setattr(programs, "OwnedKernel", lambda p, k: (calls.append(k), real(p, "missing"))[1])
    with warnings.catch_warnings(record=True) as seen, \
            pytest.raises(KernelBuildError, match="bypassing its cache, it failed too.*could not be created"):
        warnings.simplefilter("always")
        build_kernel(context, source, name)  # retried once, not forever
    assert len(calls) == 2
    # Lost fresh too: the driver's doing, so no warning sends the user to the cache.
    assert not [w for w in seen if "kernel cache" in str(w.message)]


_PRIME = """
import pyopencl as cl
from fusion_server.runtime.programs import build_kernel
ctx = cl.Context([d for p in cl.get_platforms() if "Portable" in p.name for d in p.get_devices()][:1])
for src, name in [(A, "first"), (B, "second")]:
    build_kernel(ctx, src, name)
print(build_kernel(ctx, B, "second").function_name)
"""


def test_a_poisoned_pocl_cache_entry_is_rebuilt_with_a_warning_naming_the_cache(info, tmp_path):
    """PoCL keeps a broken entry after a build crashed; here one is made by swapping two
    entries' programs, so the driver finds a program without the kernel it looks for."""
    if "portable computing language" not in info.platform.lower():
        pytest.skip("PoCL's cache")
    sources = ('A = "__kernel void first(__global float* o) { o[get_global_id(0)] *= 2.0f; }"\n'
               'B = "__kernel void second(__global float* o) { o[get_global_id(0)] += 1.0f; }"\n')
    cache = tmp_path / "kcache"
    done = run_python(sources + _PRIME, POCL_CACHE_DIR=str(cache))
    assert done.returncode == 0 and done.stdout.split() == ["second"], done.stderr
    programs = sorted(glob.glob(str(cache / "*" / "*" / "program.bc")))
    assert len(programs) == 2
    shutil.copy(programs[0], tmp_path / "swap.bc")
    shutil.copy(programs[1], programs[0])
    shutil.copy(tmp_path / "swap.bc", programs[1])
    done = run_python(sources + _PRIME, POCL_CACHE_DIR=str(cache))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["second"]
    assert "Rebuilt it fresh" in done.stderr and str(cache) in done.stderr


# -- the default device, chosen on purpose ------------------------------------------------------
def _fake(index, platform, name, kind, driver="1.0"):
    real = clients.devices()[0].info
    return dataclasses.replace(real, index=index, platform=platform, name=name, kind=kind, driver_version=driver)


def _verdict(widths, usable=True):
    return Verdict("x", "d", dict(zip(SIZES, widths)), {s: 16 for s in SIZES}, scalar_ok=usable)


def test_of_two_drivers_the_one_qualified_wider_is_the_default():
    pypi = _fake(0, "Portable Computing Language", "pthread-cpu", "CPU", "3.0-rc2")
    distro = _fake(1, "Portable Computing Language", "cpu-haswell", "CPU", "3.1")
    widths = {0: (16, 16, 8, 4), 1: (16, 16, 16, 16)}
    ranked = rank([pypi, distro], lambda d: _verdict(widths[d.index]))
    assert [r.info.index for r in ranked] == [1, 0]
    assert "best of 2 CPU drivers" in ranked[0].why and "4-byte 16" in ranked[0].why
    widths[1] = (16, 16, 4, 4)
    assert rank([pypi, distro], lambda d: _verdict(widths[d.index]))[0].info.index == 0


def test_equal_verdicts_go_to_the_newest_driver_and_unusable_ones_last():
    old = _fake(0, "Portable Computing Language", "a", "CPU", "3.0")
    new = _fake(1, "Portable Computing Language", "b", "CPU", "5.0")
    same = _verdict((16, 16, 16, 16))
    assert rank([old, new], lambda d: same)[0].info.index == 1
    broken = {0: _verdict((16, 16, 16, 16)), 1: _verdict((16, 16, 16, 16), usable=False)}
    assert rank([old, new], lambda d: broken[d.index])[0].info.index == 0


def test_a_gpu_comes_before_any_cpu_and_a_lone_device_is_not_qualified_for_the_choice():
    gpu = _fake(0, "NVIDIA CUDA", "NVIDIA H200", "GPU")
    cpu = _fake(1, "Portable Computing Language", "pthread-cpu", "CPU")
    sim = _fake(2, "Oclgrind", "Oclgrind Simulator", "GPU")
    ranked = rank([sim, cpu, gpu], lambda d: pytest.fail("no ranking needs a verdict here"))
    assert [r.info.index for r in ranked] == [0, 1, 2]
    assert "simulator" in ranked[-1].why


def test_select_device_uses_the_ranking(monkeypatch):
    pypi = _fake(0, "Portable Computing Language", "pthread-cpu", "CPU", "3.0")
    distro = _fake(1, "Portable Computing Language", "cpu-other", "CPU", "3.1")
    monkeypatch.setattr(device_mod, "list_devices", lambda: [pypi, distro])
    monkeypatch.setattr(qualification, "verdict_for",
                        lambda d, refresh=False: _verdict((16, 16, 16, 16) if d.index else (16, 16, 8, 4)))
    assert device_mod.select_device(None, choose).index == 1
    assert device_mod.select_device("0", choose).index == 0  # named: no ranking


def test_info_prints_the_verdict_the_ranking_and_the_caches(capsys, info):
    from clients import cli

    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "vector widths" in out and "qualified widths" in out
    assert "default device, and why" in out and "kernel cache" in out
    if "portable computing language" in info.platform.lower():
        assert os.path.join("pocl", "kcache") in out or os.environ.get("POCL_CACHE_DIR", "@") in out


@pytest.mark.parametrize("narrower", [2, 4, 16])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_a_widening_sum_keeps_its_inputs_width_with_several_accumulators(narrower, dtype, server):
    """float32 sums accumulate in float64, int32 ones in int64: where 8-byte elements
    qualified narrower, the reduction still reads at the 4-byte width, into several
    narrower accumulators (never past the widths the device qualified); values match numpy."""
    q = server.widths
    if q.w4 < 2:
        pytest.skip("4-byte elements run as scalar code here")
    widths = q._replace(w8=max(1, min(q.w8, q.w4 // narrower)))
    rng = np.random.default_rng(narrower)
    a = rng.integers(-50, 50, (7, 203)).astype(dtype)
    y = rng.integers(-50, 50, (7, 203)).astype(dtype)
    with server_settings(widths=widths, reduce_strategy="loop"):
        x, t = clients.asarray(a), clients.asarray(y)
        with clients.inspect() as rec:
            got = (clients.sum(x * t, axis=1) + 1).numpy()
            top = clients.max(x, axis=1).numpy()
    want = (a.astype(np.float64 if dtype == np.float32 else np.int64) * y).sum(1) + 1
    np.testing.assert_allclose(got, want.astype(got.dtype), rtol=1e-6)
    np.testing.assert_array_equal(top, a.max(1))
    assert [k.kind for k in rec.kernels] == ["reduce", "reduce"]
    if widths.w8 < widths.w4:
        from fusion_server.codegen.reduce import ReduceSpec

        split = [k for k in server.runtime.programs.keys() if isinstance(k, ReduceSpec) and k.kind == "sum"
                 and k.width == widths.w4 and k.acc_width == widths.w8]
        assert split, "no sum read at the 4-byte width into narrower accumulators"


def test_the_plan_runs_the_mixed_job_ahead_and_narrows_after_a_failure():
    """The scheduling alone, with no device: sizes decided in turn, the mixed job run
    ahead at the widths every size gets if its running job passes, and a failing mixed
    block halving the width that set its own."""
    plan = runner._Plan(16, {"casts-4-8-byte-int32": (1, 4, 8)})
    first = []
    for _ in range(5):
        first.append(plan.next_job(False))
        plan.start(first[-1])
    assert [j.name for j in first] == ["4x16", "8x16", "common", "1x16", "2x16"]
    ahead = plan.next_job(True)
    assert ahead.name == "mixed@16.16.16.16"
    plan.start(ahead)
    for job in first:
        plan.record(job, True, "")
    assert plan.next_job(True) is None and not plan.done()  # the mixed job ahead is still running
    plan.record(ahead, False, "casts-4-8-byte-int32")
    assert plan.widths == {1: 8, 2: 16, 4: 8, 8: 8}
    again = plan.next_job(False)
    assert again.name == "mixed@8.16.8.8"
    plan.start(again)
    plan.record(again, True, "")
    assert plan.done()


def test_a_size_that_fails_takes_the_next_width_and_a_guess_runs_ahead():
    plan = runner._Plan(16, {})
    four = plan.next_job(False)
    plan.start(four)
    plan.record(four, False, "elementwise-int32")
    assert plan.next_job(False).name == "4x8"
    plan.start(plan.next_job(False))
    assert plan.next_job(False).name == "8x16"  # needed before any guess
    guess = plan.next_job(True)  # what the widths will be if the running jobs pass
    assert guess.name == "mixed@16.16.8.16"
    plan.start(guess)
    assert plan.next_job(True).name == "4x4"  # a guess: 4x8 may fail too
    assert plan.width_of(4) is None
    plan.record(runner.Job(4, 8), True, "")
    assert plan.width_of(4) == 8


def test_a_clean_pocl_comes_before_a_wider_cpu_runtime_and_a_faulty_or_unusable_one_after_it():
    pocl = _fake(0, "Portable Computing Language", "pthread-AMD EPYC", "CPU", "3.0-rc2")
    intel = _fake(1, "Intel(R) OpenCL", "AMD EPYC", "CPU", "2026.22.10.0.01_160000")
    verdicts = {0: _verdict((16, 16, 8, 8)), 1: _verdict((16, 16, 16, 16))}  # (an AVX2 CPU: 8 floats)
    ranked = rank([pocl, intel], lambda d: verdicts[d.index])
    assert [r.info.index for r in ranked] == [0, 1] and "best of 2 CPU drivers" in ranked[0].why
    # PoCL 3.0 on AMD Zen 4: usable at narrower widths, after a crash at 16 lanes of 4-byte ints
    crash = Failure("4-byte x 16", "elementwise-int32", "crash", "LLVM ERROR: Cannot emit physreg copy instruction")
    verdicts[0] = dataclasses.replace(_verdict((16, 16, 8, 4)), failures=[crash])
    ranked = rank([pocl, intel], lambda d: verdicts[d.index])
    assert [r.info.index for r in ranked] == [1, 0] and "usable after 1 canary failure," in ranked[1].why
    alone = rank([pocl], lambda d: verdicts[d.index])
    assert [r.info.index for r in alone] == [0]  # the only CPU driver: still the default
    verdicts[0] = _verdict((1, 1, 1, 1), usable=False)  # PoCL's LLVM does not know the CPU
    ranked = rank([pocl, intel], lambda d: verdicts[d.index])
    assert [r.info.index for r in ranked] == [1, 0] and "NOT usable" in ranked[1].why


def test_a_driver_whose_llvm_does_not_know_the_cpu_is_told_what_to_install():
    from fusion_server.qualification.verdict import UNKNOWN_CPU, Failure

    lost = Failure("common", "scalar-helpers-int32", "build", f"OpenCL build failed: | error: {UNKNOWN_CPU} 'generic'")
    verdict = dataclasses.replace(_verdict((1, 1, 1, 1), usable=False), failures=[lost])
    lines = verdict.lines()
    assert lines[1].startswith("NOT USABLE") and "intel-opencl-rt" in lines[2] and "newer PoCL" in lines[2]
    other = dataclasses.replace(verdict, failures=[dataclasses.replace(lost, detail="wrong values at 3 of 64")])
    assert other.remedy() == "" and not any("intel-opencl-rt" in line for line in other.lines())


def test_a_server_on_a_driver_that_builds_nothing_is_refused_with_what_to_install(info, monkeypatch):
    lost = Failure("common", "scalar-helpers-int32", "build", f"error: {UNKNOWN_CPU} 'generic'")
    dead = dataclasses.replace(_verdict((1, 1, 1, 1), usable=False), failures=[lost])
    monkeypatch.setattr(qualification, "verdict_for", lambda i, refresh=False: dead)
    with pytest.raises(DeviceError, match="cannot run the library's kernels.*intel-opencl-rt"):
        qualification.widths_for(info)
    # Unusable for another reason (wrong values): used when named, with a warning.
    wrong = dataclasses.replace(dead, failures=[dataclasses.replace(lost, how="wrong", detail="3 of 64 right")])
    monkeypatch.setattr(qualification, "verdict_for", lambda i, refresh=False: wrong)
    monkeypatch.setattr(qualification, "_warned", set())
    with pytest.warns(RuntimeWarning, match="failed qualification even as scalar code"):
        assert qualification.widths_for(info) == VectorWidths(1, 1, 1, 1)
