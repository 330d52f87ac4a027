/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stddef.h>

/* Lets go of the shared libraries' pages the loader and their constructors
 * mapped at start; see libpages.c.  Returns the number of KiB that were
 * resident in those mappings (0 if none), or -errno. */
long library_pages_release(void);
