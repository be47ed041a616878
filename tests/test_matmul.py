"""Matmul against numpy: 2-D, batched, 1-D operands, views, dtypes; the epilogue fuses."""

from __future__ import annotations

import numpy as np
import pytest

import clients
from tests.conftest import rand, settle

TOL = {np.float32: dict(rtol=1e-4, atol=1e-4), np.float64: dict(rtol=1e-10, atol=1e-10)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mkn", [(1, 1, 1), (3, 5, 2), (64, 64, 64), (67, 130, 33), (8, 1, 9)])
def test_2d_against_numpy(dtype, mkn, via):
    m, k, n = mkn
    a, b = rand((m, k), dtype, 1), rand((k, n), dtype, 2)
    got = via(clients.matmul)(clients.asarray(a), clients.asarray(b)).numpy()
    assert got.dtype == dtype and got.shape == (m, n)
    np.testing.assert_allclose(got, a @ b, **TOL[dtype])


def test_integers_exactly():
    rng = np.random.default_rng(0)
    a, b = rng.integers(-9, 9, (6, 11), dtype=np.int64), rng.integers(-9, 9, (11, 5), dtype=np.int64)
    np.testing.assert_array_equal(clients.matmul(clients.asarray(a), clients.asarray(b)).numpy(), a @ b)


@pytest.mark.parametrize("sa, sb", [((2, 3, 4), (2, 4, 5)), ((3, 1, 4, 6), (2, 6, 3)), ((4, 6), (5, 6, 2)),
                                    ((2, 1, 3, 4), (1, 4, 4, 2))])
def test_batched_with_broadcast(sa, sb, via):
    a, b = rand(sa, np.float64, 3), rand(sb, np.float64, 4)
    got = via(clients.matmul)(clients.asarray(a), clients.asarray(b)).numpy()
    np.testing.assert_allclose(got, a @ b, rtol=1e-10)


def test_vector_operands_follow_numpy():
    v, w, m = rand(7, np.float64, 1), rand(7, np.float64, 2), rand((7, 3), np.float64, 3)
    tv, tw, tm = clients.asarray(v), clients.asarray(w), clients.asarray(m)
    np.testing.assert_allclose((tv @ tm).numpy(), v @ m, rtol=1e-12)
    np.testing.assert_allclose((tm.T @ tv).numpy(), m.T @ v, rtol=1e-12)
    dot = tv @ tw
    assert dot.shape == ()
    np.testing.assert_allclose(float(dot), v @ w, rtol=1e-12)


ONE_ROW_OR_COLUMN = [((300,), (300, 70)), ((70, 300), (300,)), ((300,), (300,)), ((5, 70, 300), (300,)),
                     ((300,), (4, 300, 70)), ((70, 300), (300, 1)), ((1, 300), (300, 70)),
                     ((3, 1, 40), (2, 1, 40, 9)), ((2, 7, 40), (40, 1)), ((0, 5), (5,)), ((4, 0), (0,))]


@pytest.mark.parametrize("sa, sb", ONE_ROW_OR_COLUMN)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.complex64])
def test_one_row_or_column_is_one_reduction_with_its_epilogue(sa, sb, dtype, via):
    """A matrix times a vector (or a vector times a matrix) is the reduction of the
    product: one kernel, the bias and relu (real dtypes) fused after it."""
    a, b = rand(sa, dtype, 1), rand(sb, dtype, 2)
    if dtype in (np.int32, np.int64):
        rng = np.random.default_rng(3)
        a, b = rng.integers(-9, 9, sa).astype(dtype), rng.integers(-9, 9, sb).astype(dtype)
    want = a @ b
    real = np.dtype(dtype).kind != "c"
    fn = (lambda x, y: clients.maximum(x @ y + 1, 0)) if real else (lambda x, y: x @ y)
    if real:
        want = np.maximum(want + 1, 0).astype(want.dtype)
    x, y = clients.asarray(a), clients.asarray(b)
    with clients.inspect() as rec:
        got = via(fn)(x, y)
    assert got.shape == want.shape and got.dtype == want.dtype
    tol = dict(rtol=1e-4, atol=1e-4) if np.dtype(dtype).itemsize <= 8 and dtype != np.float64 else dict(rtol=1e-10)
    np.testing.assert_allclose(got.numpy(), want, **tol)
    if want.size and a.size:  # (a GPU may sum long columns in two passes: partial sums, then theirs)
        assert {k.kind for k in rec.kernels} == {"reduce"} and len(rec.kernels) <= 2, rec.kernels
        assert rec.kernels[0].ops[:2] == ["multiply", "sum"], rec.kernels[0].ops
        assert rec.kernels[-1].ops[-2:] == (["add", "maximum"] if real else ["multiply", "sum"]), rec.kernels


def test_work_on_a_vector_operand_fuses_before_the_product():
    a, v = rand((64, 500), np.float32, 4), rand(500, np.float32, 5)
    x, w = clients.asarray(a), clients.asarray(v)
    with clients.inspect() as rec:
        got = (clients.exp(x * 0.5) @ w).numpy()
    np.testing.assert_allclose(got, np.exp(a * 0.5) @ v, rtol=1e-4, atol=1e-4)
    assert len(rec.kernels) == 1 and rec.kernels[0].kind == "reduce"


def test_transposed_and_strided_views_need_no_copy(via):
    a = rand((40, 30), np.float64, 5)
    x = clients.asarray(a)
    run = via(lambda x: x[::2].T @ x[::2])
    with clients.inspect() as rec:
        got = run(x).numpy()
    np.testing.assert_allclose(got, a[::2].T @ a[::2], rtol=1e-10)
    assert len(rec.kernels) == 1 and rec.kernels[0].kind == "matmul"


def test_mixed_dtypes_promote():
    a, b = rand((4, 3), np.float32), rand((3, 2), np.float64)
    got = clients.asarray(a) @ clients.asarray(b)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got.numpy(), a.astype(np.float64) @ b, rtol=1e-6)


def test_empty_dimensions():
    a, b = np.zeros((0, 4), np.float32), rand((4, 3))
    assert (clients.asarray(a) @ clients.asarray(b)).numpy().shape == (0, 3)
    a, b = np.zeros((3, 0), np.float32), np.zeros((0, 2), np.float32)
    np.testing.assert_array_equal((clients.asarray(a) @ clients.asarray(b)).numpy(), np.zeros((3, 2)))


def test_bias_and_relu_epilogue_is_one_kernel(via):
    a, w, bias = rand((50, 70), seed=1), rand((70, 45), seed=2), rand(45, seed=3)
    x, tw, tb = clients.asarray(a), clients.asarray(w), clients.asarray(bias)
    run = via(lambda x, tw, tb: clients.maximum(x @ tw + tb, 0.0))
    with clients.inspect() as rec:
        got = run(x, tw, tb).numpy()
    np.testing.assert_allclose(got, np.maximum(a @ w + bias, 0), rtol=1e-4, atol=1e-4)
    assert len(rec.kernels) == 1
    assert rec.kernels[0].kind == "matmul" and rec.kernels[0].ops == ["matmul", "add", "maximum"]


def test_product_kept_by_the_user_is_written_too():
    a, w = rand((20, 30), seed=4), rand((30, 10), seed=5)
    x, tw = clients.asarray(a), clients.asarray(w)
    with clients.inspect() as rec:
        prod = x @ tw
        act = clients.tanh(prod)
        got_act = act.numpy()
    np.testing.assert_allclose(got_act, np.tanh(a @ w), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(prod.numpy(), a @ w, rtol=1e-4, atol=1e-4)
    assert len(rec.kernels) == 1


def test_bad_shapes_and_dtypes_raise_at_the_call():
    x = clients.asarray(rand((3, 4)))
    with pytest.raises(ValueError, match="do not align"):
        x @ clients.asarray(rand((5, 2)))
    with pytest.raises(ValueError, match="at least one dimension"):
        x @ clients.asarray(np.float32(2))
    with pytest.raises(TypeError, match="bool"):
        clients.asarray([[True]]) @ clients.asarray([[False]])
    with pytest.raises(ValueError, match="do not broadcast"):
        clients.asarray(rand((2, 3, 4))) @ clients.asarray(rand((3, 4, 5)))
    np.testing.assert_allclose((x @ x.T).numpy(), rand((3, 4)) @ rand((3, 4)).T, rtol=1e-5)


@pytest.mark.parametrize("mkn", [(70, 33, 130), (2100, 20, 2050)])
@pytest.mark.parametrize("strategy", ["tiled", "rows"])
def test_both_matmul_strategies_agree_with_numpy(strategy, mkn):
    """The tiled kernels (GPUs; 64 and 128 tiles) and the row kernel (CPUs), forced."""
    from tests.conftest import server_settings

    m, k, n = mkn
    a, w, bias = rand((m, k), seed=6), rand((k, n), seed=7), rand(n, seed=8)
    with server_settings(matmul_strategy=strategy):
        x, tw, tb = clients.asarray(a), clients.asarray(w), clients.asarray(bias)
        with clients.inspect() as rec:
            got = clients.maximum(x @ tw + tb, 0.0).numpy()
            got_t = (x[:5].T @ tw[:5]).numpy()
    np.testing.assert_allclose(got, np.maximum(a @ w + bias, 0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_t, a[:5].T @ w[:5], rtol=1e-4, atol=1e-4)
    from fusion_server.fusers.matmul import ROWS_PACK_MIN

    products = [r for r in rec.kernels if "matmul" in r.ops]
    assert len(products) == 2 and all(r.kind == "matmul" for r in rec.kernels)
    # (the large product's B copied into panels first on the CPU kernel)
    panels = strategy == "rows" and m * n * k >= ROWS_PACK_MIN
    assert [r.ops for r in rec.kernels if r not in products] == ([["pack B in panels for matmul"]] if panels else [])
    assert all(r.variant.startswith(strategy) for r in products), [r.variant for r in products]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("width", [1, 2, 4, 8, 16])
def test_row_kernel_at_every_cpu_vector_width(dtype, width):
    """The CPU kernel's layout follows the vector registers (64-byte ones: 6-row register
    blocks of 4 vectors; narrower: 6-row blocks of 2; width 1 is the scalar fallback); every layout covers
    ragged edges, batches and strided operands."""
    from fusion_server.runtime.widths import VectorWidths
    from tests.conftest import server_settings

    rng = np.random.default_rng(width)
    a = rng.integers(-3, 4, (2, 53, 70)).astype(dtype)
    w = rng.integers(-3, 4, (70, 37)).astype(dtype)
    with server_settings(matmul_strategy="rows", widths=VectorWidths.uniform(width)), clients.inspect() as rec:
        x, tw = clients.asarray(a), clients.asarray(w)
        got = (x @ tw + 1).numpy()
        got_t = (tw.T @ x[0].T).numpy()
    vector = min(64, np.dtype(dtype).itemsize * width)
    assert [r.variant for r in rec.kernels if r.kind == "matmul"] == [f"rows, {vector}-byte vectors"] * 2
    np.testing.assert_array_equal(got, a @ w + 1)
    np.testing.assert_array_equal(got_t, w.T @ a[0].T)


def test_index_dependent_work_after_a_matmul_runs_in_its_own_kernel():
    """tril, eye and item assignment read the element's flat index, which a matmul
    kernel's epilogue does not have: they run after it, with numpy's values."""
    a = rand((5, 5))
    x = clients.asarray(a)
    np.testing.assert_allclose(clients.tril(x @ x).numpy(), np.tril(a @ a), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(((x @ x) * clients.eye(5)).numpy(), (a @ a) * np.eye(5), rtol=1e-5, atol=1e-5)
    y = x @ x
    y[0] = 5.0
    want = a @ a
    want[0] = 5.0
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)


def _operand(a: np.ndarray, transposed: bool) -> clients.Tensor:
    """`a` as a tensor, row-major or as the transpose of a row-major copy of a.T."""
    return clients.asarray(np.ascontiguousarray(a.T)).T if transposed else clients.asarray(a)


_LAYOUTS = [(False, False), (False, True), (True, False), (True, True)]


@pytest.mark.parametrize("mkn, a_t, b_t, packed", [(mkn, *t, "") for mkn in [(128, 64, 128), (200, 96, 68), (4, 16, 4)]
                                                   for t in _LAYOUTS]
                         # the large tile, whose operands read along k are packed first (A transposed,
                         # B^T row-major) when their packed layout is aligned: 2050 rows are not
                         + [((2048, 32, 2048), False, False, "A"), ((2048, 32, 2048), True, False, ""),
                            ((2048, 32, 2048), False, True, "AB"), ((2048, 32, 2048), True, True, "B"),
                            ((2050, 32, 2048), False, False, "")])
def test_aligned_tiles_read_every_layout_and_ragged_edge(mkn, a_t, b_t, packed):
    """The GPU kernel for contiguous, aligned operands (forced on any device): row-major and
    transposed operands, edges that are no multiple of the tile (rows past them are
    clamped), both tile sizes, single and double buffering, the epilogue fused; large
    products read along m and n, from packed copies where the operands are not."""
    from tests.conftest import server_settings

    m, k, n = mkn
    a, w, bias = rand((m, k), seed=11), rand((k, n), seed=12), rand(n, seed=13)
    with server_settings(matmul_strategy="tiled"), clients.inspect() as rec:
        got = clients.maximum(_operand(a, a_t) @ _operand(w, b_t) + clients.asarray(bias), 0.0).numpy()
    np.testing.assert_allclose(got, np.maximum(a @ w + bias, 0), rtol=1e-4, atol=1e-4)
    layout = "mn" if packed else ("m" if a_t else "k") + ("k" if b_t else "n")
    tile = 128 if m * n >= 2048 * 2048 else 64
    assert [r.ops for r in rec.kernels[:-1]] == [[f"pack {p} for matmul"] for p in packed]
    assert not any(r.name.endswith("_blocks") for r in rec.kernels[:-1])  # (tiles through local memory)
    assert rec.kernels[-1].ops == ["matmul", "add", "maximum"]
    assert rec.kernels[-1].variant.startswith(f"tiled, tile {tile}, aligned {layout}, depth "), rec.kernels[-1].variant
    assert all(r.kind == "matmul" for r in rec.kernels)


def test_a_packed_matmul_replays_in_a_jitted_function_and_frees_its_copies(baseline):
    """The packed copies are pool buffers of the block's own: a jitted function replays
    the packs and the product with new operands, and the pool gets them back."""
    from tests.conftest import server_settings

    m, k, n = 2048, 16, 2048
    with server_settings(matmul_strategy="tiled"):
        f = clients.jit(lambda x, y: clients.maximum(x @ y - 0.5, 0.0))
        for seed in range(3):
            a, w = rand((m, k), seed=seed), rand((k, n), seed=seed + 10)
            got = f(clients.asarray(a), clients.asarray(w)).numpy()
            np.testing.assert_allclose(got, np.maximum(a @ w - 0.5, 0), rtol=1e-4, atol=1e-4)
        assert clients.stats()["jit_replays"] >= 1
    settle()
    assert clients.stats()["buffers_live"] == baseline


@pytest.mark.parametrize("mkn, a_t, b_t", [(mkn, *t) for mkn in [(70, 150, 96), (33, 64, 40), (9, 200, 130),
                                                                 (258, 64, 130)]
                                           for t in _LAYOUTS])
def test_the_rows_kernel_reads_every_layout_and_ragged_edge(mkn, a_t, b_t):
    """The CPU kernel (forced on any device): B row-major and transposed (whose panel is
    copied down its columns), depths over several K steps and a partial last one, column
    blocks that are whole and one cut by N, the epilogue fused; in a large enough product,
    a transposed A copied row-major first and B copied into panels (the last one cut by N
    and padded)."""
    from fusion_server.fusers.matmul import ROWS_PACK_MIN
    from tests.conftest import server_settings

    m, k, n = mkn
    a, w, bias = rand((m, k), seed=21), rand((k, n), seed=22), rand(n, seed=23)
    with server_settings(matmul_strategy="rows"), clients.inspect() as rec:
        got = clients.maximum(_operand(a, a_t) @ _operand(w, b_t) + clients.asarray(bias), 0.0).numpy()
    np.testing.assert_allclose(got, np.maximum(a @ w + bias, 0), rtol=1e-4, atol=1e-4)
    large = m * n * k >= ROWS_PACK_MIN
    packs = (["pack A for matmul"] if a_t and large else []) + (["pack B in panels for matmul"] if large else [])
    assert [r.ops for r in rec.kernels[:-1]] == [[p] for p in packs]
    # (the CPU forms of the copies)
    assert all(r.name.endswith("_blocks") or r.name.startswith("panels_") for r in rec.kernels[:-1])
    assert all(r.kind == "matmul" for r in rec.kernels)
    assert rec.kernels[-1].variant.startswith("rows"), rec.kernels[-1].variant
    assert rec.kernels[-1].variant.endswith(", B in panels") == large


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_b_panels_from_a_strided_b_and_at_every_vector_width(dtype):
    """B read through strides that are neither of its dimensions contiguous (every other
    row and column of a larger matrix) copied into panels, and the panels' width at each
    of the CPU kernel's vector sizes; integers exactly."""
    from fusion_server.runtime.widths import VectorWidths
    from tests.conftest import server_settings

    rng = np.random.default_rng(31)
    for m, k, n in ((300, 90, 150), (200, 1100, 40)):  # (K past two steps of 512, ragged)
        a = rng.integers(-9, 9, (m, k)).astype(dtype)
        big = rng.integers(-9, 9, (2 * k, 2 * n + 1)).astype(dtype)
        want = a @ big[::2, 1::2]
        for width in (1, 4, 8, 16):
            with server_settings(matmul_strategy="rows", widths=VectorWidths.uniform(width)), clients.inspect() as rec:
                got = (clients.asarray(a) @ clients.asarray(big)[::2, 1::2]).numpy()
            np.testing.assert_array_equal(got, want)
            assert [r.ops for r in rec.kernels] == [["pack B in panels for matmul"], ["matmul"]], (k, width)


@pytest.mark.parametrize("n", [512, 517])
@pytest.mark.parametrize("form", ["row-major", "transposed", "strided"])
def test_b_panels_copied_in_tiles_of_several_strips(n, form):
    """The copy into panels, each work-item a tile of rows of several strips: N across
    several tiles, whole or cut by N (the last tile's copy padded), K past one tile's
    depth and ragged, B row-major, a transposed view (copied down its columns) and
    strided; at each vector width (panels of 8, 16 and 64 columns); integers exactly."""
    from fusion_server.codegen import panels as pg
    from fusion_server.runtime.widths import VectorWidths
    from tests.conftest import server_settings

    m, k = 100, pg.DEPTH * 2 + 3
    rng = np.random.default_rng(41)
    a = rng.integers(-9, 9, (m, k)).astype(np.int32)
    w = rng.integers(-9, 9, (k, n)).astype(np.int32)
    if form == "transposed":
        operand = lambda: clients.asarray(np.ascontiguousarray(w.T)).T  # noqa: E731
    elif form == "strided":
        big = np.zeros((k, 2 * n), np.int32)
        big[:, ::2] = w
        operand = lambda: clients.asarray(big)[:, ::2]  # noqa: E731
    else:
        operand = lambda: clients.asarray(w)  # noqa: E731
    for width in (4, 8, 16):
        with server_settings(matmul_strategy="rows", widths=VectorWidths.uniform(width)), clients.inspect() as rec:
            got = (clients.asarray(a) @ operand()).numpy()
        np.testing.assert_array_equal(got, a @ w)
        assert [r.ops for r in rec.kernels] == [["pack B in panels for matmul"], ["matmul"]], width


@pytest.mark.parametrize("m, k", [(300, 70), (1000, 33), (130, 1100)])
def test_a_transposed_view_copied_in_rows_of_blocks(m, k):
    """A^T (a transposed view) copied row-major for the CPU kernel, a work-item several
    blocks side by side: sizes whole and cut by a block, and a work-item's blocks cut by
    the edge; integers exactly."""
    from tests.conftest import server_settings

    n = 128  # (m * n * k past ROWS_PACK_MIN: the copy pays)
    rng = np.random.default_rng(43)
    a_t = rng.integers(-9, 9, (k, m)).astype(np.int32)  # (A stored transposed)
    w = rng.integers(-9, 9, (k, n)).astype(np.int32)
    with server_settings(matmul_strategy="rows"), clients.inspect() as rec:
        got = (clients.asarray(a_t).T @ clients.asarray(w)).numpy()
    np.testing.assert_array_equal(got, a_t.T @ w)
    assert ["pack A for matmul"] in [r.ops for r in rec.kernels]
    assert any(r.name.startswith("transpose_") and r.name.endswith("_blocks") for r in rec.kernels)


def test_aligned_tiles_batched_and_integer():
    from tests.conftest import server_settings

    rng = np.random.default_rng(3)
    a = rng.integers(-50, 50, (3, 1, 72, 48)).astype(np.int32)
    w = rng.integers(-50, 50, (2, 48, 36)).astype(np.int32)
    with server_settings(matmul_strategy="tiled"), clients.inspect() as rec:
        got = (clients.asarray(a) @ clients.asarray(w) - 7).numpy()
        picked = (clients.asarray(a)[:, :, 8:] @ clients.asarray(w)).numpy()  # offset 8 rows: still aligned
        bias = rng.integers(-9, 9, 36).astype(np.int32)  # (one row for every batch and row: the "row" class)
        biased = (clients.asarray(a) @ clients.asarray(w) + clients.asarray(bias)).numpy()
    np.testing.assert_array_equal(got, a @ w - 7)
    np.testing.assert_array_equal(picked, a[:, :, 8:] @ w)
    np.testing.assert_array_equal(biased, a @ w + bias)
    assert all("aligned kn" in r.variant for r in rec.kernels), [r.variant for r in rec.kernels]


def test_operands_that_are_not_aligned_take_the_element_kernel():
    from tests.conftest import server_settings

    a, w = rand((64, 65), seed=14), rand((64, 64), seed=15)
    x, tw = clients.asarray(a), clients.asarray(w)
    with server_settings(matmul_strategy="tiled"), clients.inspect() as rec:
        shifted = (x[:, 1:] @ tw).numpy()  # offset 1: no aligned vector
        odd = (x[:, :63] @ tw[:63]).numpy()  # a depth of 63 divides no step
        strided = (x[:, ::2][:, :32] @ tw[:32]).numpy()  # neither dimension contiguous
    np.testing.assert_allclose(shifted, a[:, 1:] @ w, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(odd, a[:, :63] @ w[:63], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(strided, a[:, ::2][:, :32] @ w[:32], rtol=1e-4, atol=1e-4)
    assert [r.variant for r in rec.kernels] == ["tiled, tile 64"] * 3


def test_the_aligned_tile_rules():
    from fusion_server.codegen import matmul as mg

    f32, row_major = np.dtype(np.float32), ((0, 64, 1), (0, 64, 1))
    assert mg.aligned_tiles(f32, 128, *row_major, [], 64, 64, 64, 48 * 1024) == ("kn", 16, True)
    assert mg.aligned_tiles(f32, 128, (0, 1, 64), (0, 64, 1), [], 64, 64, 64, 48 * 1024) == ("mn", 8, True)
    # a K of 40 takes the next depth of the table; 12 KiB of local memory, the single-buffered
    # depth 32 (two 32 x 132 tiles: 33 KiB) does not fit, nor anything in 8 KiB
    assert mg.aligned_tiles(f32, 128, *row_major, [], 64, 64, 40, 48 * 1024) == ("kn", 8, True)
    assert mg.aligned_tiles(f32, 128, *row_major, [], 64, 64, 64, 20 * 1024) == ("kn", 8, True)
    assert mg.aligned_tiles(f32, 128, *row_major, [], 64, 64, 64, 8 * 1024) is None
    assert mg.aligned_tiles(np.dtype(np.float64), 128, *row_major, [], 64, 64, 64, 48 * 1024) is None
    assert mg.aligned_tiles(f32, 128, (4, 64, 1), (0, 64, 1), [(2, 4096, 0)], 64, 64, 64, 48 * 1024) is not None
    assert mg.aligned_tiles(f32, 128, (0, 64, 1), (0, 64, 1), [(2, 4098, 0)], 64, 64, 64, 48 * 1024) is None
    assert mg.aligned_tiles(f32, 128, (0, 1, 64), (0, 64, 1), [], 62, 64, 64, 48 * 1024) is None  # m % 4 along m
