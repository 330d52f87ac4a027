/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* What --check-config checks beyond the syntax, with the daemon's own loading
 * code, and what the daemon checks the same way at start: the credentials the
 * [kubernetes] settings name, the identity the API server gives them.  Every
 * error names the key, the file to fix and what is wrong, in one line. */

#include <stdio.h>

#include "conf/config.h"
#include "k8s/auth.h"
#include "k8s/identity.h"

/* The [kubernetes] settings (and KVOLUMED_SERVICE_ACCOUNT_DIR) resolved to
 * the API server's address and credentials: what the daemon and the checks
 * both use.  -errno with *ret_error naming the key and file on failure. */
int check_resolve_auth(const Config *c, K8sAuth **ret, char **ret_error);

/* Resolves the [kubernetes] settings as the daemon does and opens and parses
 * every file they name.  -EINVAL (or -ENOMEM) with *ret_error on failure. */
int check_credentials(const Config *c, char **ret_error);

/* Valid but doubtful, one "warning: ..." line each: root-dir missing, the
 * socket of a statically configured driver missing. */
void check_print_warnings(const Config *c, FILE *out);

/* The [api] socket's directories, as the daemon checks them before it binds
 * (agent/apisocket.h): a symlink or a directory someone else could write
 * is refused with *ret_error "file:line: ...".  Missing ones are fine (made
 * at start), and so are those this user may not look into. */
int check_api_socket(const Config *c, char **ret_error);

/* The rule an identity must pass: a node's identity must be node-name's.
 * -EPERM with *ret_error naming the credential and node-name otherwise. */
int check_identity(const Config *c, const K8sIdentity *id, char **ret_error);

/* What credential kvolumed presents, for messages: "[kubernetes] kubeconfig
 * /etc/kvolumed/kubeconfig", "[kubernetes] client-certificate /x", ... */
char *check_describe_credential(const Config *c);

/* --check-config --online: one SelfSubjectReview as the daemon would send it;
 * prints who the API server says kvolumed is, or that it cannot tell.  0, or
 * -errno with *ret_error (TLS failure, 401, a node identity of another node). */
int check_online(const Config *c, FILE *out, char **ret_error);
