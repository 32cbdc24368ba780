/*
 * test_delay_comp.c - the delay-compensated gradient against values worked
 * out by hand, and against a float64 evaluation of the formula written here.
 *
 *     g_dc = g + lambda * g * g * (w_now - w_pulled)      (optimizer/delay_comp.h)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "delay_comp.h"

/*
 * Inputs chosen so that every intermediate is exact in float32, with the
 * result worked out on paper:
 *   0: g 0.5,  now 1.25, pulled 1.0,  lambda 2: d 0.25, g^2 0.25, *d 0.0625, *2 0.125 -> 0.625
 *   1: g -2,   now 0.5,  pulled 1.5:           d -1,   g^2 4,    *d -4,     *2 -8    -> -10
 *   2: g 3,    now 7,    pulled 7:             d 0                                   -> 3
 *   3: g 0,    now 9,    pulled -9:            g^2 0                                 -> 0
 *   4: g -0.25, now -1,  pulled -3:            d 2,    g^2 0.0625, *d 0.125, *2 0.25 -> 0
 */
static void test_hand_computed(void **state)
{
    (void)state;
    const float g[] = {0.5f, -2.0f, 3.0f, 0.0f, -0.25f};
    const float now[] = {1.25f, 0.5f, 7.0f, 9.0f, -1.0f};
    const float pulled[] = {1.0f, 1.5f, 7.0f, -9.0f, -3.0f};
    const float want[] = {0.625f, -10.0f, 3.0f, 0.0f, 0.0f};
    float out[5];
    zps_delay_compensate(out, g, now, pulled, 2.0f, 5);
    for (int i = 0; i < 5; i++)
        assert_true(out[i] == want[i]);
}

/* lambda 0 is plain ASGD: the gradient unchanged, bit for bit. */
static void test_lambda_zero(void **state)
{
    (void)state;
    float g[64], now[64], pulled[64], out[64];
    for (int i = 0; i < 64; i++) {
        g[i] = (float)(i - 31) * 0.37f;
        now[i] = (float)i * 0.11f;
        pulled[i] = (float)(64 - i) * -0.05f;
    }
    zps_delay_compensate(out, g, now, pulled, 0.0f, 64);
    assert_memory_equal(out, g, sizeof(g));
}

/* The formula in float64 for values of several magnitudes; in place too. */
static void test_reference(void **state)
{
    (void)state;
    enum { N = 101 };
    float g[N], now[N], pulled[N], out[N];
    const float lambda = 0.04f;
    for (int i = 0; i < N; i++) {
        g[i] = (float)((i * 7) % 23 - 11) * (i % 3 ? 0.3f : 4.0f);
        now[i] = (float)((i * 5) % 17) * 0.1f - 0.8f;
        pulled[i] = now[i] - (float)((i * 3) % 7 - 3) * 0.02f;
    }
    zps_delay_compensate(out, g, now, pulled, lambda, N);
    for (int i = 0; i < N; i++) {
        double d = (double)now[i] - (double)pulled[i];
        double ref = (double)g[i] + (double)lambda * (double)g[i] * (double)g[i] * d;
        double tol = 1e-6 * (fabs((double)g[i]) + fabs(ref - (double)g[i])) + 1e-30;
        assert_true(fabs((double)out[i] - ref) <= tol);
    }
    float in_place[N];
    memcpy(in_place, g, sizeof(g));
    zps_delay_compensate(in_place, in_place, now, pulled, lambda, N);
    assert_memory_equal(in_place, out, sizeof(out));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_computed),
        cmocka_unit_test(test_lambda_zero),
        cmocka_unit_test(test_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
