/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* `kvolumed status [POD]`: the node's volumes as a table for a person,
 * read from the local volumes API of the kvolumed that runs (agent/localapi.h).
 * argv starts after "status".  Returns the exit status: 0, or 1 when no
 * kvolumed answers, the API is off, or the pod is unknown. */
int status_main(int argc, char *argv[]);
