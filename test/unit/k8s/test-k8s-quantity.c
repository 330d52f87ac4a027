/* SPDX-License-Identifier: Apache-2.0 */
/* k8s_quantity_parse{,_milli} against apimachinery's resource.Quantity
 * rules: the cases of its quantity_test.go (TestQuantityParse,
 * TestParseQuantityString, the invalid list), read as Value() and
 * MilliValue() (both round up), and kvolumed's refusals (negative, beyond
 * int64) where Quantity would saturate. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "k8s/quantity.h"
#include "systemd/macro.h"

typedef struct Case {
        const char *in;
        int64_t value; /* Value(): units, rounded up */
        int64_t milli; /* MilliValue(), rounded up; -1: out of range */
} Case;

#define KI 1024LL
#define MI (KI * 1024)
#define GI (MI * 1024)
#define TI (GI * 1024)
#define PI (TI * 1024)
#define EI (PI * 1024)

static const Case cases[] = {
        /* zeroes with every suffix */
        { "0", 0, 0 }, { "0n", 0, 0 }, { "0u", 0, 0 }, { "0m", 0, 0 }, { "0Ki", 0, 0 }, { "0k", 0, 0 },
        { "0Mi", 0, 0 }, { "0M", 0, 0 }, { "0Gi", 0, 0 }, { "0G", 0, 0 }, { "0Ti", 0, 0 }, { "0T", 0, 0 },
        { "-0", 0, 0 }, { "+0", 0, 0 },
        /* suffix-less */
        { "1", 1, 1000 }, { "9", 9, 9000 },
        /* binary */
        { "1Ki", KI, KI * 1000 }, { "8Ki", 8 * KI, 8 * KI * 1000 }, { "7Mi", 7 * MI, 7 * MI * 1000 },
        { "6Gi", 6 * GI, 6 * GI * 1000 }, { "5Ti", 5 * TI, 5 * TI * 1000 }, { "4Pi", 4 * PI, 4 * PI * 1000 },
        { "3Ei", 3 * EI, -1 }, { "10Ti", 10 * TI, 10 * TI * 1000 }, { "100Ti", 100 * TI, 100 * TI * 1000 },
        { "64Mi", 64 * MI, 64 * MI * 1000 },
        /* decimal */
        { "5n", 1, 1 }, { "4u", 1, 1 }, { "3m", 1, 3 }, { "500m", 1, 500 }, { "8k", 8000, 8000000 },
        { "50k", 50000, 50000000 }, { "7M", 7000000, 7000000000 }, { "6G", 6000000000, 6000000000000 },
        { "1G", 1000000000, 1000000000000 }, { "5T", 5000000000000, 5000000000000000 },
        { "40T", 40000000000000, 40000000000000000 }, { "300T", 300000000000000, 300000000000000000 },
        { "2P", 2000000000000000, 2000000000000000000 }, { "1E", 1000000000000000000, -1 },
        /* exponents */
        { "1E-3", 1, 1 }, { "1e3", 1000, 1000000 }, { "1E6", 1000000, 1000000000 },
        { "1e9", 1000000000, 1000000000000 }, { "1E12", 1000000000000, 1000000000000000 },
        { "1e15", 1000000000000000, 1000000000000000000 }, { "1E18", 1000000000000000000, -1 },
        { "1e14", 100000000000000, 100000000000000000 }, { "1e13", 10000000000000, 10000000000000000 },
        { "100.035k", 100035, 100035000 }, { "1.2e3", 1200, 1200000 }, { "1.3E+6", 1300000, 1300000000 },
        { "1.40e9", 1400000000, 1400000000000 }, { "1.53E12", 1530000000000, 1530000000000000 },
        { "1.6e15", 1600000000000000, 1600000000000000000 }, { "1.7E18", 1700000000000000000, -1 },
        /* things that look like floating point */
        { "0.001", 1, 1 }, { "0.0005k", 1, 500 }, { "0.005", 1, 5 }, { "0.05", 1, 50 }, { "0.5", 1, 500 },
        { "0.00050k", 1, 500 }, { "0.00500", 1, 5 }, { "0.05000", 1, 50 }, { "0.50000", 1, 500 },
        { "0.5e0", 1, 500 }, { "0.5e-1", 1, 50 }, { "0.5e-2", 1, 5 }, { "10.035M", 10035000, 10035000000 },
        { "9.01", 10, 9010 }, { "8.1k", 8100, 8100000 }, { "7.123456M", 7123456, 7123456000 },
        { "6.987654321G", 6987654321, 6987654321000 }, { "5.444T", 5444000000000, 5444000000000000 },
        { "40.1T", 40100000000000, 40100000000000000 }, { "300.2T", 300200000000000, 300200000000000000 },
        { "2.5P", 2500000000000000, 2500000000000000000 }, { "1.01E", 1010000000000000000, -1 },
        { "1.5", 2, 1500 }, { "1.5Gi", GI + GI / 2, (GI + GI / 2) * 1000 },
        /* things that round */
        { "3.001n", 1, 1 }, { "1.1E-9", 1, 1 }, { "0.0000000001", 1, 1 }, { "0.9n", 1, 1 },
        { "0.00000012345", 1, 1 }, { "1001m", 2, 1001 }, { "1000m", 1, 1000 }, { "999u", 1, 1 },
        { "1000u", 1, 1 }, { "1001u", 1, 2 }, { "12E", -1, -1 },
        /* fractional binary */
        { "100.035Ki", 102436, 102435840 }, { "0.5Mi", MI / 2, MI / 2 * 1000 },
        { "0.05Gi", 53687092, 53687091200 }, { "0.025Ti", 27487790695, 27487790694400 },
        /* written by trolls */
        { "0.000000000001Ki", 1, 1 }, { ".001", 1, 1 }, { ".0001k", 1, 100 }, { "1.", 1, 1000 },
        { "1.G", 1000000000, 1000000000000 }, { ".", 0, 0 }, { "-.", 0, 0 }, { "+1Ki", KI, KI * 1000 },
        /* the largest */
        { "9223372036854775807", INT64_MAX, -1 }, { "9223372036854775807m", 9223372036854776, INT64_MAX },
        { "7Ei", 7 * EI, -1 }, { "8Ei", -1, -1 }, { "9Ei", -1, -1 }, { "9223372036854775808", -1, -1 },
        { "9223372036854775807Ki", -1, -1 }, { "99999999999999999999999", -1, -1 },
        { "1e-40", 1, 1 }, { "0e99", 0, 0 }, { "1e40", -1, -1 },
        /* many fraction digits: the dropped ones still round up */
        { "1.0000000000000000000000000000000000000000000001", 2, 1001 },
        { "1.0000000000000000000000000000000000000000000000", 1, 1000 },
};

static void test_table(void **state) {
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const Case *c = &cases[i];
                int64_t v = -42;
                int r = k8s_quantity_parse(c->in, &v);

                print_message("# %s\n", c->in);
                if (c->value < 0) {
                        assert_int_equal(r, -ERANGE);
                        assert_int_equal(v, -42);
                } else {
                        assert_int_equal(r, 0);
                        assert_int_equal(v, c->value);
                }
                v = -42;
                r = k8s_quantity_parse_milli(c->in, &v);
                if (c->milli < 0) {
                        assert_int_equal(r, -ERANGE);
                        assert_int_equal(v, -42);
                } else {
                        assert_int_equal(r, 0);
                        assert_int_equal(v, c->milli);
                }
        }
}

static void test_invalid(void **state) {
        static const char *const invalid[] = {
                /* apimachinery's list */
                "1.1.M", "1+1.0M", "0.1mi", "0.1am", "aoeu", ".5i", "1i", "-3.01i", "-3.01e-", " 1", "1 ",
                /* and more */
                "", "+", "-", "Gi", "1GB", "1 Gi", "1.2.3", "1e", "1e+", "1E3.5", "1ee3", "1Kib", "1KI", "1K",
                "0x10", "1_000", "1,5", "∞", "1\n", "NaN", "1e3Ki", "1mm",
        };
        int64_t v = -42;

        for (size_t i = 0; i < ELEMENTSOF(invalid); i++) {
                print_message("# \"%s\"\n", invalid[i]);
                assert_int_equal(k8s_quantity_parse(invalid[i], &v), -EINVAL);
                assert_int_equal(k8s_quantity_parse_milli(invalid[i], &v), -EINVAL);
                assert_int_equal(v, -42);
        }
        assert_int_equal(k8s_quantity_parse(NULL, &v), -EINVAL);
        assert_int_equal(k8s_quantity_parse_milli(NULL, &v), -EINVAL);
}

static void test_negative_refused(void **state) {
        static const char *const negative[] = { "-1", "-1Gi", "-500m", "-1n", "-0.000000001", "-1e3", "-1e-40" };
        int64_t v = -42;

        /* Quantity allows them; no size, limit or divisor kvolumed reads may be. */
        for (size_t i = 0; i < ELEMENTSOF(negative); i++) {
                assert_int_equal(k8s_quantity_parse(negative[i], &v), -ERANGE);
                assert_int_equal(k8s_quantity_parse_milli(negative[i], &v), -ERANGE);
        }
        assert_int_equal(v, -42);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_table),
                cmocka_unit_test(test_invalid),
                cmocka_unit_test(test_negative_refused),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
