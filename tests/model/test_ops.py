"""Tests for sgh.model.ops: the custom-gradient reference values (cases 1-6), the neuron's recipes.

Each reference case is checked with the TF2 mechanism (``tf.custom_gradient``) and, where the
reference asks for it or it is natural, with the classic TF1 graph-mode mechanism
(``RegisterGradient`` + ``gradient_override_map``), asserting the same numbers. Cases 3, 4 and
5 call no sgh code on purpose: they pin the mechanisms sgh's ops are built on (several outputs,
a gradient that reads the op's inputs and outputs, one function with several gradients), so a
TensorFlow release that changes them fails here, before it changes what the neuron trains on.
"""

import os
import re

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import uuid  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from sgh.model.ops import doubly_sn, gradient_reversal, ste_sign  # noqa: E402


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-np.asarray(z, np.float64)))


def _unique(name):
    # Gradient registrations are process-global and cannot be replaced: one fresh name per call.
    return f"{name}_{uuid.uuid4().hex}"


def _dsn_grads(z, e):
    """(codes, probs, dz, de) of doubly_sn with loss = sum(codes) + sum(probs)."""
    with tf.GradientTape() as tape:
        tape.watch([z, e])
        codes, probs = doubly_sn(z, e)
        loss = tf.reduce_sum(codes) + tf.reduce_sum(probs)
    dz, de = tape.gradient(loss, [z, e])
    return codes, probs, dz, de


_dsn_fn = tf.function(_dsn_grads)
_dsn_xla = tf.function(_dsn_grads, jit_compile=True)


# ---------------------------------------------------------------- case 1: DoublySN reference


@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
def test_case1_doubly_sn_reference_float32(mode):
    fn = {"eager": _dsn_grads, "function": _dsn_fn, "xla": _dsn_xla}[mode]
    z, e = tf.constant(10.0), tf.constant(10.0)
    y, p, dz, de = (t.numpy() for t in fn(z, e))
    # sigmoid(10) = 0.9999546 < e = 10, so the code is 0.
    assert y.dtype == np.float32 and y == 0.0
    np.testing.assert_allclose(p, 0.9999546, rtol=1e-7)
    # dz = p (1 - p) (gy + gp) = 4.5417e-05 * (1 + 1); de = gy = 1.
    np.testing.assert_allclose(dz, 9.083335e-05, rtol=1e-6)
    assert de == 1.0


@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
def test_case1_doubly_sn_reference_float64(mode):
    fn = {"eager": _dsn_grads, "function": _dsn_fn, "xla": _dsn_xla}[mode]
    z, e = tf.constant(10.0, tf.float64), tf.constant(10.0, tf.float64)
    y, p, dz, de = (t.numpy() for t in fn(z, e))
    p_ref = _sigmoid(10.0)
    assert y.dtype == np.float64 and y == 0.0 and dz.dtype == np.float64
    np.testing.assert_allclose(p, p_ref, rtol=1e-15)
    # The exact value is 2 e^-10 / (1 + e^-10)^2 = 9.079162e-05. The float32 reference 9.083335e-05
    # is 4.6e-4 too high: 1 - p cancels, p = 0.9999546 keeps ~3 significant digits of 1 - p.
    np.testing.assert_allclose(dz, 2.0 * np.exp(-10.0) / (1.0 + np.exp(-10.0)) ** 2, rtol=1e-11)
    np.testing.assert_allclose(dz, 9.079162e-05, rtol=1e-6)
    assert de == 1.0


def test_doubly_sn_tie_is_a_strict_bit():
    # logits 0 -> p = 0.5 exactly (sigmoid(0) is exact in binary), epsilon = 0.5: p == e.
    z, e = tf.constant([0.0, 0.0]), tf.constant([0.5, 0.5])
    codes, probs = doubly_sn(z, e)
    assert probs.numpy().tolist() == [0.5, 0.5]
    assert codes.numpy().tolist() == [1.0, 1.0]
    # The classic (sign(p - e) + 1) / 2 gives sign(0) = 0 -> 0.5: not a bit.
    classic = (tf.sign(probs - e) + 1.0) / 2.0
    assert classic.numpy().tolist() == [0.5, 0.5]
    # Same under XLA (its sigmoid differs from eager by ulps elsewhere, but sigmoid(0) = 0.5).
    xla = tf.function(doubly_sn, jit_compile=True)
    for dtype in (tf.float32, tf.float64):
        codes, probs = xla(tf.cast(z, dtype), tf.cast(e, dtype))
        assert probs.numpy().tolist() == [0.5, 0.5] and codes.numpy().tolist() == [1.0, 1.0]


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_doubly_sn_paths_agree(dtype):
    rng = np.random.default_rng(0)
    z = tf.constant(rng.normal(0.0, 3.0, (7, 5)), dtype)
    e = tf.constant(rng.uniform(size=(7, 5)), dtype)
    c = tf.constant(rng.normal(size=(7, 5)), dtype)  # non-trivial upstream gradients
    d = tf.constant(rng.normal(size=(7, 5)), dtype)

    def grads(z, e):
        with tf.GradientTape() as tape:
            tape.watch([z, e])
            codes, probs = doubly_sn(z, e)
            loss = tf.reduce_sum(c * codes) + tf.reduce_sum(d * probs)
        return (codes, probs, *tape.gradient(loss, [z, e]))

    eager = [t.numpy() for t in grads(z, e)]
    # XLA's float32 sigmoid differs from the eager kernel by a few ulp (~1e-7 absolute), which the
    # cancellation in 1 - p turns into ~1e-5 relative near saturation: hence atol in float32.
    tol = dict(rtol=1e-6, atol=1e-7) if dtype == tf.float32 else dict(rtol=1e-13, atol=0)
    for fn in (tf.function(grads), tf.function(grads, jit_compile=True)):
        out = [t.numpy() for t in fn(z, e)]
        np.testing.assert_array_equal(out[0], eager[0])  # same bits
        np.testing.assert_array_equal(out[3], eager[3])  # de = c exactly
        for a, b in zip(out, eager, strict=True):
            assert a.dtype == dtype.as_numpy_dtype
            np.testing.assert_allclose(a, b, **tol)
    # And the values themselves: dz = p(1-p)(c + d), de = c.
    p = _sigmoid(z.numpy())
    rtol = 1e-5 if dtype == tf.float32 else 1e-12
    np.testing.assert_allclose(eager[2], p * (1 - p) * (c.numpy() + d.numpy()), rtol=rtol)
    np.testing.assert_allclose(eager[3], c.numpy(), rtol=0)


def test_doubly_sn_broadcast_epsilon_and_python_float():
    z = tf.constant([[-1.0, 0.0, 2.0], [3.0, -0.5, 0.1]])
    with tf.GradientTape() as tape:
        tape.watch(z)
        e = tf.constant(0.5)
        tape.watch(e)
        codes, _ = doubly_sn(z, e)
        loss = tf.reduce_sum(codes * [[1.0, 2.0, 3.0]])
    dz, de = tape.gradient(loss, [z, e])
    np.testing.assert_array_equal(codes.numpy(), [[0, 1, 1], [1, 0, 1]])
    assert de.shape == () and de.numpy() == 2 * (1 + 2 + 3)  # scalar e collects all of g_codes
    assert dz.shape == z.shape
    np.testing.assert_array_equal(doubly_sn(z, 0.5)[0].numpy(), codes.numpy())


def test_doubly_sn_unconnected_output_gives_zero_not_error():
    # Only one output reaches the loss; TF hands the grad fn zeros for the other one.
    z, e = tf.constant([1.0, -2.0]), tf.constant([0.3, 0.9])
    p = _sigmoid(z.numpy())
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([z, e])
        codes, probs = doubly_sn(z, e)
        only_p, only_h = tf.reduce_sum(3.0 * probs), tf.reduce_sum(5.0 * codes)
    dz, de = tape.gradient(only_p, [z, e])
    np.testing.assert_allclose(dz, 3.0 * p * (1 - p), rtol=1e-5)
    np.testing.assert_array_equal(de, [0.0, 0.0])
    dz, de = tape.gradient(only_h, [z, e])
    np.testing.assert_allclose(dz, 5.0 * p * (1 - p), rtol=1e-5)
    np.testing.assert_array_equal(de, [5.0, 5.0])


def test_doubly_sn_rejects_integer_logits():
    with pytest.raises(TypeError, match="floating"):
        doubly_sn(tf.constant([1, 2]), tf.constant([0, 0]))


# ------------------------------------------------- neuron recipes (docs/design.md, Estimators)


def test_recipe1_codes_are_strict_bits_and_half_threshold_is_sign_of_z():
    rng = np.random.default_rng(1)
    z = tf.constant(rng.normal(0.0, 5.0, 10_000), tf.float32)
    e = tf.constant(rng.uniform(size=10_000), tf.float32)
    codes = doubly_sn(z, e)[0].numpy()
    assert set(np.unique(codes)) <= {0.0, 1.0}
    # epsilon = 0.5: h = 1[z >= 0], including z = 0 exactly.
    zs = np.array([-3.0, -1e-6, 0.0, 1e-6, 3.0], np.float32)
    h = doubly_sn(tf.constant(zs), tf.fill([5], 0.5))[0].numpy()
    np.testing.assert_array_equal(h, [0, 0, 1, 1, 1])
    np.testing.assert_array_equal(doubly_sn(z, 0.5)[0].numpy(), (z.numpy() >= 0).astype(np.float32))


def test_recipe2_code_mean_matches_sigmoid():
    m = 200_000
    zs = np.array([-3.0, -0.7, 0.0, 0.4, 2.5])
    rng = np.random.default_rng(2)
    z = tf.constant(np.broadcast_to(zs, (m, 5)), tf.float64)
    e = tf.constant(rng.uniform(size=(m, 5)), tf.float64)
    mean = doubly_sn(z, e)[0].numpy().mean(axis=0)
    p = _sigmoid(zs)
    # |mean - p| <= 4 sd of a Bernoulli mean; e.g. z = 0: 4 * sqrt(0.25 / 2e5) = 0.0045.
    assert np.all(np.abs(mean - p) <= 4.0 * np.sqrt(p * (1 - p) / m))


@pytest.mark.parametrize("dtype, rtol", [(tf.float32, 1e-5), (tf.float64, 1e-12)])
def test_recipe3_linear_loss_in_codes(dtype, rtol):
    # L = sum_k c_k h_k: g_codes = c, g_probs = 0 -> dL/dz_k = c_k sigmoid'(z_k), dL/de_k = c_k.
    zs = np.array([-4.0, -1.0, 0.0, 0.5, 3.0])
    cs = np.array([2.0, -1.5, 0.25, 7.0, -3.0])
    z, c = tf.constant(zs, dtype), tf.constant(cs, dtype)
    e = tf.constant(np.full(5, 0.3), dtype)
    with tf.GradientTape() as tape:
        tape.watch([z, e])
        loss = tf.reduce_sum(c * doubly_sn(z, e)[0])
    dz, de = tape.gradient(loss, [z, e])
    p = _sigmoid(zs)
    np.testing.assert_allclose(dz, cs * p * (1 - p), rtol=rtol)  # z = 0: 0.25 * 0.25 = 0.0625
    np.testing.assert_allclose(de, cs, rtol=0)


def test_recipe6_loss_on_probs_only():
    # L = sum_k g_k p_k: dL/dz_k = sigmoid'(z_k) g_k; the codes get no signal, so de = 0.
    zs = np.array([-2.0, 0.0, 1.0, 6.0])
    gs = np.array([1.0, -2.0, 0.5, 4.0])
    z, e = tf.constant(zs), tf.constant(np.full(4, 0.5))
    with tf.GradientTape() as tape:
        tape.watch([z, e])
        loss = tf.reduce_sum(tf.constant(gs) * doubly_sn(z, e)[1])
    dz, de = tape.gradient(loss, [z, e])
    p = _sigmoid(zs)
    np.testing.assert_allclose(dz, gs * p * (1 - p), rtol=1e-12)  # z = 0: -2 * 0.25 = -0.5
    np.testing.assert_array_equal(de, np.zeros(4))


# ---------------------------------------------------------------- case 2: straight-through sign

X2 = np.array([10.0, 0.0, -10.0, -0.05, 0.05], np.float32)
Y2 = [1.0, 0.0, -1.0, -1.0, 1.0]
DY_10X = [0.0, 10.0, 0.0, 10.0, 10.0]  # 10x = [100, 0, -100, -0.5, 0.5]: window [0,1,0,1,1] * 10
DY_X = [0.0, 1.0, 0.0, 1.0, 1.0]  # |x| <= 1 except +-10


def _ste_tf2(mult):
    x = tf.constant(X2)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = ste_sign(mult * x)
    return y.numpy(), tape.gradient(y, x).numpy()


def _sign_classic(mult):
    graph = tf.Graph()
    with graph.as_default():
        name = _unique("HardTanhSTE")

        @tf.compat.v1.RegisterGradient(name)
        def _grad(op, g):
            x = op.inputs[0]
            return g * tf.cast(tf.abs(x) <= 1.0, x.dtype)

        x = tf.constant(X2)
        with graph.gradient_override_map({"Sign": name}):
            y = tf.sign(mult * x)
        (dx,) = tf.compat.v1.gradients(y, [x])
        with tf.compat.v1.Session(graph=graph) as sess:
            return sess.run([y, dx])


@pytest.mark.parametrize("mult, expected", [(10.0, DY_10X), (1.0, DY_X)])
def test_case2_ste_sign(mult, expected):
    y, dx = _ste_tf2(mult)
    np.testing.assert_array_equal(y, Y2)
    np.testing.assert_array_equal(dx, expected)
    y_c, dx_c = _sign_classic(mult)  # the TF1 override path gives the same numbers
    np.testing.assert_array_equal(y_c, Y2)
    np.testing.assert_array_equal(dx_c, expected)


def test_ste_sign_window_edges_and_xla():
    x = tf.constant([-1.0, 1.0, -1.0001, 1.0001, 0.0], tf.float64)

    def f(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = ste_sign(x)
        return y, tape.gradient(y, x)

    for fn in (f, tf.function(f, jit_compile=True)):
        y, dx = fn(x)
        np.testing.assert_array_equal(y, [-1, 1, -1, 1, 0])
        np.testing.assert_array_equal(dx, [1, 1, 0, 0, 1])  # -1 <= x <= 1 is inclusive


# ---------------------------------------------------------------- case 6: gradient reversal


def test_case6_gradient_reversal_tf2_and_classic():
    x1, x2 = tf.constant(3.0), tf.constant(4.0)
    with tf.GradientTape() as tape:
        tape.watch([x1, x2])
        s = x1 + x2
        y = gradient_reversal(s)
    g_s, g1, g2 = tape.gradient(y, [s, x1, x2])
    assert y.numpy() == 7.0
    assert (g_s.numpy(), g1.numpy(), g2.numpy()) == (-1.0, -1.0, -1.0)  # not +1

    graph = tf.Graph()
    with graph.as_default():
        name = _unique("ReverseGrad")

        @tf.compat.v1.RegisterGradient(name)
        def _grad(op, grad):
            return -grad

        a, b = tf.constant(3.0), tf.constant(4.0)
        s_c = a + b
        with graph.gradient_override_map({"Identity": name}):
            y_c = tf.identity(s_c)
        grads = tf.compat.v1.gradients(y_c, [s_c, a, b])
        with tf.compat.v1.Session(graph=graph) as sess:
            y_val, *g_val = sess.run([y_c, *grads])
    assert y_val == 7.0
    assert g_val == [-1.0, -1.0, -1.0]


def test_gradient_reversal_scale_dtype_and_xla():
    x = tf.constant([1.0, -2.0], tf.float64)

    def f(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = gradient_reversal(x, scale=0.25)
            loss = tf.reduce_sum(y * tf.constant([2.0, 8.0], tf.float64))
        return y, tape.gradient(loss, x)

    for fn in (f, tf.function(f), tf.function(f, jit_compile=True)):
        y, dx = fn(x)
        np.testing.assert_array_equal(y, [1.0, -2.0])
        np.testing.assert_array_equal(dx, [-0.5, -2.0])  # -0.25 * [2, 8]
        assert dx.dtype == tf.float64


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "1.0", True, None, [1.0]])
def test_gradient_reversal_rejects_bad_scale(bad):
    expected = f"scale={bad!r} is impossible; accepted: a finite number"
    with pytest.raises(ValueError, match=re.escape(expected)):
        gradient_reversal(tf.constant(1.0), scale=bad)


# ---------------------------------------------------------------- cases 3, 4, 5


def test_case3_two_outputs_constant_override():
    a, b = tf.constant(10.0), tf.constant(10.0)

    def f(a, b):
        return 2.0 * a + 10.0, b + 10.0

    @tf.custom_gradient
    def f_override(a, b):
        def grad(g1, g2):
            return tf.constant(123.0), tf.constant(456.0)

        return f(a, b), grad

    for fn, expected in ((f, [2.0, 1.0]), (f_override, [123.0, 456.0])):
        with tf.GradientTape() as tape:
            tape.watch([a, b])
            y1, y2 = fn(a, b)
            loss = y1 + y2
        assert (y1.numpy(), y2.numpy()) == (30.0, 20.0)
        assert [g.numpy() for g in tape.gradient(loss, [a, b])] == expected


def test_case4_override_reads_outputs_and_inputs():
    x, b = tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0])

    @tf.custom_gradient
    def f(x, b):
        outputs = (100.0 * x, 10.0 * b)
        inputs = (x, b)

        def grad(g1, g2):
            return g1 * outputs[0], g2 * inputs[1]

        return outputs, grad

    for fn in (lambda x, b: f(x, b), tf.function(lambda x, b: f(x, b))):
        with tf.GradientTape() as tape:
            tape.watch([x, b])
            y1, y2 = fn(x, b)
            loss = tf.reduce_sum(y1) + tf.reduce_sum(y2)
        np.testing.assert_array_equal(y1, [100.0, 200.0])
        np.testing.assert_array_equal(y2, [30.0, 40.0])
        dx, db = tape.gradient(loss, [x, b])
        np.testing.assert_array_equal(dx, [100.0, 200.0])  # g1 = 1 times outputs[0] = 100 x
        np.testing.assert_array_equal(db, [3.0, 4.0])  # g2 = 1 times inputs[1] = b


def _foo_variants():
    def plain(x):
        return 2.0 * x

    @tf.custom_gradient
    def x_plus_dy(x):
        return 2.0 * x, lambda dy: x + dy

    @tf.custom_gradient
    def half_input(x):
        return 2.0 * x, lambda dy: x * dy / 2.0

    return [(plain, 2.0), (x_plus_dy, 101.0), (half_input, 50.0)]


def test_case5_same_function_three_gradients():
    x = tf.constant(100.0)
    for foo, expected in _foo_variants():  # 2; 100 + 1 = 101; 100 * 1 / 2 = 50
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = foo(x)
        assert y.numpy() == 200.0
        assert tape.gradient(y, x).numpy() == expected


def test_case5_classic_override_on_mul():
    # foo(x) = x * 2 is one Mul op: its overridden gradient sees op.inputs[0] = x = 100.
    overrides = [
        (None, 2.0),
        (lambda op, dy: (op.inputs[0] + dy, None), 101.0),
        (lambda op, dy: (op.inputs[0] * dy / 2.0, None), 50.0),
    ]
    for grad_fn, expected in overrides:
        graph = tf.Graph()
        with graph.as_default():
            x = tf.constant(100.0)
            if grad_fn is None:
                y = tf.multiply(x, 2.0)
            else:
                name = _unique("FooGrad")
                tf.compat.v1.RegisterGradient(name)(grad_fn)
                with graph.gradient_override_map({"Mul": name}):
                    y = tf.multiply(x, 2.0)
            (dx,) = tf.compat.v1.gradients(y, [x])
            with tf.compat.v1.Session(graph=graph) as sess:
                y_val, dx_val = sess.run([y, dx])
        assert (y_val, dx_val) == (200.0, expected)
