/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* resource.Quantity (k8s.io/apimachinery/pkg/api/resource) as the API
 * writes it: "<sign><digits>[.<digits>]<suffix>", the suffix one of the
 * binary Ki Mi Gi Ti Pi Ei, the decimal n u m "" k M G T P E, or an
 * exponent e<N> / E<N> ("1e3", "1.3E+6").  "1.", ".5" and "." (zero) are
 * quantities, as ParseQuantity has it; whitespace, "1i", "0.1mi", "1.1.M",
 * "1+1.0M" and "-3.01e-" are not.
 *
 * Both readers round up to a whole unit as Quantity.Value() and
 * MilliValue() do ("3.001n" is 1 byte, "0.5m" is 1 milli-unit).  They refuse
 * what kvolumed cannot use rather than saturating as Quantity does: a value
 * above INT64_MAX is -ERANGE, a negative one (only "-0" is not) too; text
 * that is no quantity is -EINVAL.  Nothing is written to *ret on failure. */

#include <stdint.h>

/* In units (bytes for memory and storage): "64Mi" → 67108864, "1G" →
 * 1000000000, "500m" → 1 (rounded up). */
int k8s_quantity_parse(const char *s, int64_t *ret);

/* In thousandths (CPU millicores, a resourceFieldRef divisor): "500m" → 500,
 * "1.5" → 1500, "1" → 1000, "250u" → 1 (rounded up). */
int k8s_quantity_parse_milli(const char *s, int64_t *ret);
