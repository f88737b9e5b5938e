"""Tests of ecosim.problems: exact gradients (vs central differences), the batch protocol,
determinism from keys, immutability, and the documented constructions."""
import dataclasses

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from ecosim.problems import MLP, DataBatch, NoiseBatch, Problem, Quadratic, Rosenbrock


# ------------------------------------------------------------------------------- helpers


def _leaves(params):
    return params.items() if isinstance(params, dict) else [(None, params)]


def _copy(params):
    return {k: v.copy() for k, v in params.items()} if isinstance(params, dict) else params.copy()


def _assert_same(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_array_equal(a[k], b[k])
    else:
        assert_array_equal(a, b)


def fd_grad(problem, params, batch=None, h=1e-6):
    """Central differences (f(x + h e_i) - f(x - h e_i)) / (2h), coordinate by coordinate.

    Error: truncation h^2 |f'''| / 6 plus rounding ~ eps |f| / h, i.e. about 1e-12 + 1e-10
    for the O(1)-scaled float64 problems below, far under the 1e-6 relative tolerance.
    """
    out = {}
    for name, value in _leaves(params):
        g = np.zeros_like(value)
        for i in np.ndindex(value.shape):
            def f(delta):
                p = _copy(params)
                (p[name] if name is not None else p)[i] += delta
                return problem.loss(p, batch)
            g[i] = (f(h) - f(-h)) / (2 * h)
        out[name] = g
    return out if isinstance(params, dict) else out[None]


def rel_err(g, g_ref):
    if isinstance(g, dict):
        num = np.sqrt(sum(np.sum((g[k] - g_ref[k]) ** 2) for k in g))
        den = np.sqrt(sum(np.sum(g_ref[k] ** 2) for k in g))
        return num / den
    return np.linalg.norm(g - g_ref) / np.linalg.norm(g_ref)


def small_mlp(activation="tanh", loss="mse", **kw):
    kw = {"n_train": 48, "n_val": 16, "key": 3, "dtype": np.float64, **kw}
    return MLP((3, 5, 4, 2 if loss == "mse" else 3), activation, loss, **kw)


# ----------------------------------------------------------------- gradients vs differences

GRAD_CASES = {
    "quadratic": lambda: Quadratic(6, L=2.0, cond=100.0),
    "quadratic-rotated": lambda: Quadratic(6, L=2.0, cond=100.0, rotated=True, key=4),
    "quadratic-noisy": lambda: Quadratic(6, cond=10.0, rotated=True, grad_noise=0.3),
    "rosenbrock-2": lambda: Rosenbrock(),
    "rosenbrock-5": lambda: Rosenbrock(5, init_scale=0.3),
    "rosenbrock-a": lambda: Rosenbrock(4, a=0.5, b=3.0, init_scale=0.5),
    **{f"mlp-{a}-{l}": (lambda a=a, l=l: small_mlp(a, l, noise=0.1))
       for a in ("relu", "gelu", "tanh") for l in ("mse", "xent")},
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_grad_matches_central_differences(name):
    problem = GRAD_CASES[name]()
    params = problem.init(1)
    for batch in [None, problem.batch(key=5, step=2, batch_size=16)]:
        g = problem.grad(params, batch)
        assert rel_err(g, fd_grad(problem, params, batch)) < 1e-6
        value, g2 = problem.loss_and_grad(params, batch)
        assert value == problem.loss(params, batch)
        _assert_same(g, g2)


def test_grad_structure_and_dtype_follow_params():
    for problem in [Quadratic(4, dtype=np.float32), Rosenbrock(3, dtype=np.float32),
                    MLP((3, 4, 2), n_train=8, n_val=4)]:
        params = problem.init(0)
        g = problem.grad(params)
        for (k1, p), (k2, gg) in zip(_leaves(params), _leaves(g)):
            assert k1 == k2 and gg.shape == p.shape and gg.dtype == p.dtype == np.float32
        assert isinstance(problem.loss(params), float)


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_inputs_are_not_mutated(name):
    problem = GRAD_CASES[name]()
    params = problem.init(2)
    batch = problem.batch(key=1, step=0, batch_size=8)
    before = _copy(params)
    for _, v in _leaves(params):
        v.setflags(write=False)  # any in-place write would raise
    problem.loss(params, batch)
    g = problem.grad(params, batch)
    problem.val_loss(params)
    _assert_same(params, before)
    for (_, p), (_, gg) in zip(_leaves(params), _leaves(g)):
        assert not np.shares_memory(p, gg)


def test_protocol_attributes():
    for problem in [Quadratic(3), Rosenbrock(), small_mlp()]:
        assert isinstance(problem, Problem)
        assert problem.has_validation == isinstance(problem, MLP)
        value = problem.val_loss(problem.init(0))
        assert (value is None) != problem.has_validation
    assert Quadratic(3).batch(0, 0) is None and Rosenbrock().batch(0, 5, 32) is None


# -------------------------------------------------------------------------------- quadratic


def test_quadratic_spectrum_log_uniform_with_exact_endpoints():
    for L, cond in [(1.0, 1e3), (3.7, 10.0), (0.1, 2.0)]:
        q = Quadratic(7, L=L, cond=cond)
        lam = q.eigenvalues
        assert lam[0] == L / cond and lam[-1] == L and q.mu == L / cond
        ratios = lam[1:] / lam[:-1]
        np.testing.assert_allclose(ratios, cond ** (1 / 6), rtol=1e-13)
    assert_array_equal(Quadratic(5, L=2.5).eigenvalues, np.full(5, 2.5))
    assert_array_equal(Quadratic(1, L=2.5).eigenvalues, [2.5])


def test_quadratic_rotation_and_hessian():
    q = Quadratic(8, L=4.0, cond=50.0, rotated=True, key=11)
    h, r = q.hessian, q.rotation
    assert_array_equal(h, h.T)
    np.testing.assert_allclose(r.T @ r, np.eye(8), atol=1e-14)
    np.testing.assert_allclose(np.linalg.eigvalsh(h), q.eigenvalues, rtol=1e-12)
    assert not np.allclose(h, np.diag(np.diag(h)))  # really rotated
    x = q.init(0)
    np.testing.assert_allclose(q.grad(x), h @ (x - q.optimum), rtol=1e-14)
    plain = Quadratic(8, L=4.0, cond=50.0)
    assert plain.rotation is None
    assert_array_equal(plain.hessian, np.diag(plain.eigenvalues))


def test_quadratic_optimum_off_grid_and_centred_option():
    q = Quadratic(64, key=5)
    xs = q.optimum
    assert q.f_star == 0.0 and q.loss(xs) == 0.0
    assert_array_equal(q.grad(xs), np.zeros(64))
    # x* = sqrt(2) - 1 + U(-1/2, 1/2): within (-0.09, 0.92), and no coordinate lies on the
    # grid 2^-16 Z (which contains every bfloat16/fp8 value in that range).
    assert np.all((xs > np.sqrt(2) - 1.5) & (xs < np.sqrt(2) - 0.5))
    assert not np.any(xs * 2.0**16 == np.round(xs * 2.0**16))
    zero = Quadratic(4, offset=None)
    assert_array_equal(zero.optimum, np.zeros(4))
    np.testing.assert_allclose(Quadratic(4, offset=2.0, key=1).optimum - 2.0,
                               Quadratic(4, offset=0.0, key=1).optimum, rtol=0, atol=1e-15)


def test_quadratic_is_a_pure_function_of_its_key():
    a, b = Quadratic(5, cond=9.0, rotated=True, key=7), Quadratic(5, cond=9.0, rotated=True, key=7)
    assert_array_equal(a.hessian, b.hessian)
    assert_array_equal(a.optimum, b.optimum)
    assert_array_equal(a.init(3), b.init(3))
    c = Quadratic(5, cond=9.0, rotated=True, key=8)
    assert not np.array_equal(a.optimum, c.optimum)
    assert not np.array_equal(a.init(3), a.init(4))


def test_quadratic_noise_batches():
    q = Quadratic(4000, grad_noise=0.25, key=1)
    b1, b2 = q.batch(key=9, step=3), q.batch(key=9, step=3)
    assert isinstance(b1, NoiseBatch)
    assert_array_equal(b1.noise, b2.noise)
    assert not np.array_equal(b1.noise, q.batch(key=9, step=4).noise)
    assert not np.array_equal(b1.noise, q.batch(key=10, step=3).noise)
    # The batch key, the init key and the construction key use separate streams.
    assert not np.allclose(np.abs(q.init(9) - q.optimum), np.abs(q.batch(9, 0).noise) / 0.5)
    # grad = H (x - x*) + xi exactly, loss = f + xi^T (x - x*).
    x = q.init(0)
    np.testing.assert_allclose(q.grad(x, b1) - q.grad(x), b1.noise, rtol=0, atol=1e-14)
    assert q.loss(x, b1) - q.loss(x) == pytest.approx(b1.noise @ (x - q.optimum), rel=1e-10)
    # xi ~ N(0, 0.25 I): over 4000 coordinates the sample mean has sd 0.5/sqrt(4000) = 0.0079
    # and the sample variance relative sd sqrt(2/4000) = 0.022; 5-sigma bounds.
    xi = b1.noise
    assert abs(xi.mean()) < 5 * 0.0079
    assert abs(xi.var() / 0.25 - 1) < 5 * 0.022
    # batch_size is checked and ignored.
    assert_array_equal(q.batch(9, 3, batch_size=7).noise, xi)
    with pytest.raises(ValueError, match="batch_size"):
        q.batch(9, 3, batch_size=0)


def test_quadratic_float32():
    q = Quadratic(6, cond=10.0, rotated=True, grad_noise=0.1, dtype=np.float32)
    x = q.init(0)
    assert x.dtype == q.optimum.dtype == q.hessian.dtype == np.float32
    assert q.grad(x, q.batch(0, 0)).dtype == np.float32


def test_quadratic_is_frozen_and_replaceable():
    q = Quadratic(3, cond=2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.L = 2.0
    with pytest.raises(ValueError):
        q.optimum[0] = 1.0  # read-only array
    q2 = dataclasses.replace(q, grad_noise=0.5)
    assert q2.grad_noise == 0.5 and q2.cond == 2.0
    assert_array_equal(q2.optimum, q.optimum)
    assert "Quadratic(d=3, L=1.0, cond=2.0" in repr(q)


@pytest.mark.parametrize("kwargs, err, match", [
    (dict(d=0), ValueError, "d must be a positive"),
    (dict(d=2.5), TypeError, "d must be"),
    (dict(d=3, L=0.0), ValueError, "L must be"),
    (dict(d=3, cond=0.5), ValueError, "cond must be >= 1"),
    (dict(d=1, cond=2.0), ValueError, "cond must be 1.0"),
    (dict(d=3, key=-1), ValueError, "key must be a non-negative integer"),
    (dict(d=3, key=True), TypeError, "key must be"),
    (dict(d=3, grad_noise=-1.0), ValueError, "grad_noise"),
    (dict(d=3, dtype=np.int32), TypeError, "floating dtype"),
    (dict(d=3, rotated=1), TypeError, "rotated must be a bool"),
    (dict(d=3, offset=np.inf), ValueError, "offset"),
])
def test_quadratic_rejects_bad_arguments(kwargs, err, match):
    with pytest.raises(err, match=match):
        Quadratic(**kwargs)


def test_quadratic_rejects_bad_calls():
    q = Quadratic(3)
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        q.grad(np.zeros(4))
    with pytest.raises(TypeError, match="NoiseBatch"):
        q.loss(np.zeros(3), np.zeros(3))
    with pytest.raises(ValueError, match="step"):
        q.batch(0, -1)


# ------------------------------------------------------------------------------- rosenbrock


def test_rosenbrock_classic_values():
    r = Rosenbrock()
    x0 = r.init(0)
    assert_array_equal(x0, [-1.2, 1.0])
    assert r.loss(x0) == pytest.approx(24.2, rel=1e-14)
    # Hand gradient at (-1.2, 1): (-4*100*(-1.2)*(1-1.44) - 2*(2.2), 200*(1-1.44)) = (-215.6, -88)
    np.testing.assert_allclose(r.grad(x0), [-215.6, -88.0], rtol=1e-13)
    assert_array_equal(Rosenbrock(5).init(0), [-1.2, 1, -1.2, 1, -1.2])


def test_rosenbrock_optimum_cases():
    for d, a, xs in [(2, 1.0, [1, 1]), (2, 0.5, [0.5, 0.25]), (4, 1.0, [1] * 4), (3, 0.0, [0] * 3)]:
        r = Rosenbrock(d, a=a)
        assert_array_equal(r.optimum, xs)
        assert r.f_star == 0.0 and r.loss(r.optimum) == 0.0
        assert_array_equal(r.grad(r.optimum), np.zeros(d))
    r = Rosenbrock(3, a=0.5)
    assert r.optimum is None and r.f_star is None


def test_rosenbrock_init_perturbation_is_keyed():
    r = Rosenbrock(6, init_scale=0.1)
    assert_array_equal(r.init(4), r.init(4))
    assert not np.array_equal(r.init(4), r.init(5))
    assert np.max(np.abs(r.init(4) - Rosenbrock(6).init(0))) < 0.5  # 5 sd


def test_rosenbrock_rejects_bad_arguments():
    with pytest.raises(ValueError, match=">= 2"):
        Rosenbrock(1)
    with pytest.raises(ValueError, match="b must be"):
        Rosenbrock(b=0.0)
    with pytest.raises(TypeError, match="a must be a real"):
        Rosenbrock(a="1")
    with pytest.raises(TypeError, match="full-batch"):
        Rosenbrock().loss(np.zeros(2), batch=NoiseBatch(np.zeros(2)))


# -------------------------------------------------------------------------------------- MLP


def test_mlp_parameter_layout_and_policies():
    m = MLP((6, 5, 4, 3, 2), n_train=8, n_val=4)
    names = [p.name for p in m.param_info]
    assert names == ["W0", "b0", "W1", "b1", "W2", "b2", "W3", "b3"]
    assert [p.kind for p in m.param_info] == ["matrix", "vector"] * 4
    assert m.param_info[0].shape == (5, 6) and m.param_info[1].shape == (5,)
    assert m.num_params == 5 * 7 + 4 * 6 + 3 * 5 + 2 * 4 and m.n_layers == 4
    assert m.quantized_names("all") == tuple(names)
    assert m.quantized_names("matrices") == ("W0", "W1", "W2", "W3")
    assert m.quantized_names("hidden") == ("W1", "W2")
    assert MLP((3, 4, 2), n_train=4, n_val=2).quantized_names("hidden") == ()
    with pytest.raises(ValueError, match="policy"):
        m.quantized_names("weights")
    params = m.init(0)
    assert list(params) == names
    for p in m.param_info:
        assert params[p.name].shape == p.shape and params[p.name].dtype == np.float32
        if p.kind == "vector":
            assert_array_equal(params[p.name], 0)


@pytest.mark.parametrize("activation, var", [("relu", 2 / 400), ("gelu", 2 / 400),
                                             ("tanh", 2 / (400 + 300))])
def test_mlp_init_scale(activation, var):
    m = MLP((400, 300, 2), activation, n_train=4, n_val=2, dtype=np.float64)
    w = m.init(0)["W0"]
    # sample variance of 120000 Gaussians: relative sd sqrt(2/120000) = 0.0041; 5 sd.
    assert abs(w.var() / var - 1) < 5 * 0.0041
    assert_array_equal(w, m.init(0)["W0"])
    assert not np.array_equal(w, m.init(1)["W0"])


def test_mlp_teacher_is_the_optimum_for_matching_mse():
    m = small_mlp("gelu", "mse")
    assert m.f_star == 0.0
    assert m.loss(m.optimum) < 1e-28 and m.val_loss(m.optimum) < 1e-28
    assert rel_err(m.grad(m.optimum), m.grad(m.init(0))) == 1  # grad at the optimum ~ 0
    assert max(np.abs(g).max() for g in m.grad(m.optimum).values()) < 1e-14
    for other in [small_mlp("gelu", "mse", noise=0.1), small_mlp("gelu", "xent"),
                  small_mlp("gelu", "mse", teacher=(7,))]:
        assert other.optimum is None and other.f_star is None
    assert small_mlp(teacher=()).teacher_params.keys() == {"W0", "b0"}


def test_mlp_data_shapes_and_labels():
    m = MLP((5, 8, 4), "relu", "xent", n_train=400, n_val=100, key=2)
    assert m.x_train.shape == (400, 5) and m.x_val.shape == (100, 5)
    assert m.y_train.dtype == np.int64 and m.y_train.shape == (400,)
    counts = np.bincount(m.y_train, minlength=4)
    assert len(counts) == 4 and np.all(counts > 40)  # every class well represented
    r = MLP((5, 3), loss="mse", n_train=10, n_val=5, noise=0.5)
    assert r.y_train.shape == (10, 3) and r.y_train.dtype == np.float32
    params = m.init(0)
    assert m.predict(params, m.x_val).shape == (100, 4)
    assert 0.0 <= m.accuracy(params) <= 1.0
    with pytest.raises(ValueError, match="xent"):
        r.accuracy(r.init(0))


def test_mlp_float32_matches_float64():
    m32, m64 = small_mlp("tanh", "xent", dtype=np.float32), small_mlp("tanh", "xent")
    p64 = m64.init(0)
    p32 = {k: v.astype(np.float32) for k, v in p64.items()}
    g32, g64 = m32.grad(p32), m64.grad(p64)
    assert all(g.dtype == np.float32 for g in g32.values())
    assert rel_err(g32, g64) < 1e-5
    assert m32.loss(p32) == pytest.approx(m64.loss(p64), rel=1e-5)


def test_mlp_batches_are_epochs_without_replacement():
    m = MLP((2, 3, 1), n_train=50, n_val=5, key=1, dtype=np.float64)
    assert m.batch(0, 0, None) is None
    bs = [m.batch(key=4, step=s, batch_size=16) for s in range(6)]
    assert all(isinstance(b, DataBatch) and b.x.shape == (16, 2) for b in bs)
    assert_array_equal(bs[2].x, m.batch(4, 2, 16).x)
    rows = {tuple(r) for r in m.x_train}

    def ids(b):
        return [tuple(r) for r in b.x]
    epoch0 = sum((ids(b) for b in bs[:3]), [])  # 50 // 16 = 3 steps per epoch
    assert len(set(epoch0)) == 48 and set(epoch0) <= rows
    assert ids(bs[3]) != ids(bs[0])  # next epoch, new order
    assert not np.array_equal(m.batch(5, 0, 16).x, bs[0].x)
    for b in bs:  # targets travel with their inputs
        idx = [np.flatnonzero((m.x_train == r).all(axis=1))[0] for r in b.x]
        assert_array_equal(b.y, m.y_train[idx])
    with pytest.raises(ValueError, match="at most n_train"):
        m.batch(0, 0, 51)
    with pytest.raises(TypeError, match="DataBatch"):
        m.loss(m.init(0), (m.x_train, m.y_train))


def test_mlp_gradient_descent_learns():
    m = MLP((4, 16, 1), "tanh", "mse", n_train=256, n_val=64, key=0, dtype=np.float64)
    params = m.init(0)
    start = m.val_loss(params)
    for step in range(300):
        g = m.grad(params, m.batch(1, step, 32))
        params = {k: params[k] - 0.1 * g[k] for k in params}
    assert m.val_loss(params) < 0.5 * start


def test_mlp_is_immutable_and_validates():
    m = small_mlp()
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.sizes = (1, 2)
    with pytest.raises(ValueError):
        m.x_train[0, 0] = 1.0
    assert repr(m).startswith("MLP(sizes=(3, 5, 4, 2), activation='tanh', loss='mse'")
    params = m.init(0)
    with pytest.raises(ValueError, match="keys"):
        m.loss({k: v for k, v in params.items() if k != "b1"})
    with pytest.raises(ValueError, match=r"params\['W0'\] must have shape \(5, 3\)"):
        m.loss({**params, "W0": np.zeros((3, 5))})
    with pytest.raises(TypeError, match="dict"):
        m.loss(np.zeros(3))
    for kwargs, err, match in [
        (dict(sizes=(3,)), ValueError, "sizes must be 2 or more"),
        (dict(sizes=(3, 0, 2)), ValueError, "positive"),
        (dict(sizes=3), TypeError, "sequence"),
        (dict(sizes=(3, 2), activation="sigmoid"), ValueError, "activation must be one of"),
        (dict(sizes=(3, 2), loss="hinge"), ValueError, "loss must be one of"),
        (dict(sizes=(3, 1), loss="xent"), ValueError, "2 classes"),
        (dict(sizes=(3, 2), n_train=0), ValueError, "positive"),
        (dict(sizes=(3, 2), noise=-0.1), ValueError, "noise"),
    ]:
        with pytest.raises(err, match=match):
            MLP(**kwargs)


def test_mlp_from_data():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((30, 4)), rng.integers(0, 3, 30)
    xin = x.copy()
    m = MLP.from_data(x[:20], y[:20], x[20:], y[20:], hidden=(5,), dtype=np.float64)
    assert m.sizes == (4, 5, 3) and m.n_train == 20 and m.n_val == 10
    assert_array_equal(x, xin)
    params = m.init(0)
    assert rel_err(m.grad(params), fd_grad(m, params)) < 1e-6
    r = MLP.from_data(x[:20], x[:20, 0], x[20:], x[20:, 0], loss="mse")
    assert r.sizes == (4, 1) and r.y_train.shape == (20, 1)
    with pytest.raises(ValueError, match="rows"):
        MLP.from_data(x[:20], y[:19], x[20:], y[20:])
    with pytest.raises(ValueError, match="integer labels"):
        MLP.from_data(x[:20], x[:20, 0], x[20:], y[20:])


def test_mlp_digits():
    pytest.importorskip("sklearn")
    m = MLP.digits(hidden=(16,), n_val=300, key=1)
    assert m.sizes == (64, 16, 10) and m.n_train == 1497 and m.n_val == 300
    assert m.x_train.min() >= -1 and m.x_train.max() <= 1
    assert set(np.unique(m.y_val)) == set(range(10))
    params = m.init(0)
    assert np.isfinite(m.val_loss(params))
    assert repr(m).startswith("MLP.digits(hidden=(16,)")
    assert_array_equal(MLP.digits(n_val=300, key=1).y_val, m.y_val)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("d", [2, 3, 16])
def test_rosenbrock_loss_and_grad_is_loss_and_grad_bit_for_bit(d, dtype):
    # its fused loss_and_grad shares the residual: the same operations, so the same bits
    r = Rosenbrock(d, a=0.7, b=30.0, dtype=dtype)
    gen = np.random.default_rng(d)
    for scale in (1e-3, 1.0, 1e3):
        for _ in range(20):
            x = (scale * gen.standard_normal(d)).astype(dtype)
            value, g = r.loss_and_grad(x)
            assert value == r.loss(x)
            assert g.dtype == dtype and g.tobytes() == r.grad(x).tobytes()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("kw", [{}, {"cond": 50.0, "rotated": True, "key": 3},
                                {"grad_noise": 0.5}, {"offset": None}])
def test_quadratic_loss_and_grad_is_loss_and_grad_bit_for_bit(kw, dtype):
    # its fused loss_and_grad shares z = x - x* and H z: the same operations, so the same bits
    q = Quadratic(12, dtype=dtype, **kw)
    gen = np.random.default_rng(5)
    for step in range(20):
        x = (10.0 ** (step % 5 - 2) * gen.standard_normal(12)).astype(dtype)
        batch = q.batch(7, step)
        value, g = q.loss_and_grad(x, batch)
        assert value == q.loss(x, batch)
        assert g.dtype == dtype and g.tobytes() == q.grad(x, batch).tobytes()
