/* SPDX-License-Identifier: Apache-2.0 */
/* The pure part of the CRI client: which pods have a container that is not
 * known to have exited, and which a sandbox that is not known to be stopped,
 * from the runtime's two lists. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "csi/cri.h"
#include "csi/cri.pb-c.h"

#define UID_A "11111111-1111-1111-1111-111111111111"
#define UID_B "22222222-2222-2222-2222-222222222222"
#define UID_C "33333333-3333-3333-3333-333333333333"

typedef struct Lists {
        Runtime__V1__PodSandbox sb[4];
        Runtime__V1__PodSandboxMetadata md[4];
        Runtime__V1__PodSandbox *sbp[4];
        Runtime__V1__PodSandbox__LabelsEntry sblbl[4];
        Runtime__V1__PodSandbox__LabelsEntry *sblblp[4];
        size_t n_sb;
        Runtime__V1__Container ct[8];
        Runtime__V1__Container *ctp[8];
        Runtime__V1__Container__LabelsEntry lbl[8];
        Runtime__V1__Container__LabelsEntry *lblp[8];
        size_t n_ct;
} Lists;

#define READY RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_READY
#define NOTREADY RUNTIME__V1__POD_SANDBOX_STATE__SANDBOX_NOTREADY

/* A sandbox named by its metadata.uid, or (uid NULL) by its label only. */
static Runtime__V1__PodSandbox *sandbox_with(Lists *l, const char *id, const char *uid, const char *uid_label,
                                             Runtime__V1__PodSandboxState state) {
        size_t i = l->n_sb++;
        runtime__v1__pod_sandbox__init(&l->sb[i]);
        runtime__v1__pod_sandbox_metadata__init(&l->md[i]);
        l->md[i].uid = (char *) (uid ?: "");
        l->md[i].name = (char *) "p";
        l->sb[i].id = (char *) id;
        l->sb[i].metadata = &l->md[i];
        l->sb[i].state = state;
        if (uid_label) {
                runtime__v1__pod_sandbox__labels_entry__init(&l->sblbl[i]);
                l->sblbl[i].key = (char *) "io.kubernetes.pod.uid";
                l->sblbl[i].value = (char *) uid_label;
                l->sblblp[i] = &l->sblbl[i];
                l->sb[i].labels = &l->sblblp[i];
                l->sb[i].n_labels = 1;
        }
        l->sbp[i] = &l->sb[i];
        return &l->sb[i];
}

static void sandbox(Lists *l, const char *id, const char *uid, Runtime__V1__PodSandboxState state) {
        sandbox_with(l, id, uid, NULL, state);
}

static void container(Lists *l, const char *sandbox_id, Runtime__V1__ContainerState state, const char *uid_label) {
        size_t i = l->n_ct++;
        runtime__v1__container__init(&l->ct[i]);
        l->ct[i].id = (char *) "c";
        l->ct[i].pod_sandbox_id = (char *) sandbox_id;
        l->ct[i].state = state;
        if (uid_label) {
                runtime__v1__container__labels_entry__init(&l->lbl[i]);
                l->lbl[i].key = (char *) "io.kubernetes.pod.uid";
                l->lbl[i].value = (char *) uid_label;
                l->lblp[i] = &l->lbl[i];
                l->ct[i].labels = &l->lblp[i];
                l->ct[i].n_labels = 1;
        }
        l->ctp[i] = &l->ct[i];
}

static void strv_free(char **v) {
        for (size_t i = 0; v && v[i]; i++)
                free(v[i]);
        free(v);
}

/* The pods with a container created/running/unknown, and (when ret_ready)
 * those with a READY sandbox. */
static char **decide(Lists *l, char ***ret_ready) {
        Runtime__V1__ListContainersResponse cr = RUNTIME__V1__LIST_CONTAINERS_RESPONSE__INIT;
        Runtime__V1__ListPodSandboxResponse sr = RUNTIME__V1__LIST_POD_SANDBOX_RESPONSE__INIT;
        uint8_t cb[4096], sbuf[4096];
        char **uids = NULL, **ready = NULL;

        cr.containers = l->ctp;
        cr.n_containers = l->n_ct;
        sr.items = l->sbp;
        sr.n_items = l->n_sb;
        size_t cn = runtime__v1__list_containers_response__pack(&cr, cb);
        size_t sn = runtime__v1__list_pod_sandbox_response__pack(&sr, sbuf);
        assert_int_equal(cri_running_pods(cb, cn, sbuf, sn, &uids, &ready), 0);
        assert_non_null(uids);
        assert_non_null(ready);
        if (ret_ready)
                *ret_ready = ready;
        else
                strv_free(ready);
        return uids;
}

static char **running(Lists *l) {
        return decide(l, NULL);
}

static void test_states_count_except_exited(void **state) {
        Lists l = {};
        sandbox(&l, "sa", UID_A, NOTREADY);
        sandbox(&l, "sb", UID_B, NOTREADY);
        sandbox(&l, "sc", UID_C, NOTREADY);
        container(&l, "sa", RUNTIME__V1__CONTAINER_STATE__CONTAINER_EXITED, NULL);
        container(&l, "sb", RUNTIME__V1__CONTAINER_STATE__CONTAINER_CREATED, NULL);
        container(&l, "sc", RUNTIME__V1__CONTAINER_STATE__CONTAINER_UNKNOWN, NULL);
        char **ready = NULL;
        char **u = decide(&l, &ready);
        assert_string_equal(u[0], UID_B);
        assert_string_equal(u[1], UID_C);
        assert_null(u[2]);
        assert_null(ready[0]);
        strv_free(u);
        strv_free(ready);
}

static void test_grouped_sorted_distinct(void **state) {
        Lists l = {};
        sandbox(&l, "sb", UID_B, READY);
        sandbox(&l, "sa", UID_A, READY);
        sandbox(&l, "sb2", UID_B, READY); /* a second attempt's sandbox */
        container(&l, "sb", RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING, NULL);
        container(&l, "sa", RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING, NULL);
        container(&l, "sb", RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING, NULL);
        container(&l, "sa", RUNTIME__V1__CONTAINER_STATE__CONTAINER_EXITED, NULL);
        char **ready = NULL;
        char **u = decide(&l, &ready);
        assert_string_equal(u[0], UID_A);
        assert_string_equal(u[1], UID_B);
        assert_null(u[2]);
        assert_string_equal(ready[0], UID_A);
        assert_string_equal(ready[1], UID_B);
        assert_null(ready[2]);
        strv_free(u);
        strv_free(ready);
}

static void test_sandbox_uid_wins_label_is_fallback(void **state) {
        Lists l = {};
        /* A stopped sandbox with no container is nothing the runtime runs. */
        sandbox(&l, "sa", UID_A, NOTREADY);
        sandbox(&l, "sb", UID_B, NOTREADY);
        /* The sandbox's metadata.uid names the pod, whatever the label says. */
        container(&l, "sb", RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING, UID_A);
        /* Sandbox gone between the calls: the label, when there is one. */
        container(&l, "gone", RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING, UID_C);
        container(&l, "gone2", RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING, NULL);
        char **ready = NULL;
        char **u = decide(&l, &ready);
        assert_string_equal(u[0], UID_B);
        assert_string_equal(u[1], UID_C);
        assert_null(u[2]);
        assert_null(ready[0]);
        strv_free(u);
        strv_free(ready);
}

/* CrashLoopBackOff: the container EXITED between two attempts, its sandbox
 * READY; the runner starts the next attempt in it with the same mounts. */
static void test_exited_container_in_ready_sandbox_counts(void **state) {
        Lists l = {};
        sandbox(&l, "sa", UID_A, READY);
        container(&l, "sa", RUNTIME__V1__CONTAINER_STATE__CONTAINER_EXITED, NULL);
        container(&l, "sa", RUNTIME__V1__CONTAINER_STATE__CONTAINER_EXITED, NULL);
        char **ready = NULL;
        char **u = decide(&l, &ready);
        assert_null(u[0]);
        assert_string_equal(ready[0], UID_A);
        assert_null(ready[1]);
        strv_free(u);
        strv_free(ready);
}

/* An image being pulled: the sandbox READY, no container yet. */
static void test_ready_sandbox_without_container_counts(void **state) {
        Lists l = {};
        sandbox(&l, "sb", UID_B, READY);
        /* A sandbox whose metadata names no pod: its kubelet label does. */
        sandbox_with(&l, "sc", NULL, UID_C, READY);
        /* Naming no pod at all: nothing to hold. */
        sandbox_with(&l, "sx", NULL, NULL, READY);
        char **ready = NULL;
        char **u = decide(&l, &ready);
        assert_null(u[0]);
        assert_string_equal(ready[0], UID_B);
        assert_string_equal(ready[1], UID_C);
        assert_null(ready[2]);
        strv_free(u);
        strv_free(ready);
}

/* Stopped as kubelet's killPod stops it: nothing holds the pod any more,
 * whatever its exited containers. */
static void test_notready_sandbox_with_exited_containers_does_not_count(void **state) {
        Lists l = {};
        sandbox(&l, "sa", UID_A, NOTREADY);
        sandbox(&l, "sa0", UID_A, NOTREADY);
        container(&l, "sa", RUNTIME__V1__CONTAINER_STATE__CONTAINER_EXITED, UID_A);
        container(&l, "sa0", RUNTIME__V1__CONTAINER_STATE__CONTAINER_EXITED, UID_A);
        char **ready = NULL;
        char **u = decide(&l, &ready);
        assert_null(u[0]);
        assert_null(ready[0]);
        strv_free(u);
        strv_free(ready);
}

/* A state this client does not know is not "stopped". */
static void test_unknown_sandbox_state_counts(void **state) {
        Lists l = {};
        sandbox(&l, "sa", UID_A, (Runtime__V1__PodSandboxState) 7);
        char **ready = NULL;
        char **u = decide(&l, &ready);
        assert_null(u[0]);
        assert_string_equal(ready[0], UID_A);
        strv_free(u);
        strv_free(ready);
}

static void test_garbage(void **state) {
        static const uint8_t bad[] = { 0x0a, 0x80 };
        char **u = NULL, **r = NULL;
        assert_int_equal(cri_running_pods(bad, sizeof bad, NULL, 0, &u, &r), -EBADMSG);
        assert_null(u);
        assert_null(r);
        Lists l = {};
        u = running(&l);
        assert_null(u[0]);
        strv_free(u);
}

static void test_event_decode(void **state) {
        Runtime__V1__PodSandboxMetadata md = RUNTIME__V1__POD_SANDBOX_METADATA__INIT;
        Runtime__V1__PodSandboxStatus sb = RUNTIME__V1__POD_SANDBOX_STATUS__INIT;
        Runtime__V1__ContainerEventResponse e = RUNTIME__V1__CONTAINER_EVENT_RESPONSE__INIT;
        uint8_t buf[256];
        const uint8_t garbage[] = { 0xff, 0xff, 0xff };
        size_t n;
        void *owner = NULL;
        CriEvent ev;

        md.uid = (char *) UID_A;
        sb.id = (char *) "sb1";
        sb.metadata = &md;
        e.container_id = (char *) "c1";
        e.container_event_type = RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_STOPPED_EVENT;
        e.created_at = 42;
        e.pod_sandbox_status = &sb;
        n = runtime__v1__container_event_response__pack(&e, buf);
        assert_int_equal(cri_event_decode(buf, n, &ev, &owner), 0);
        assert_int_equal(ev.type, CRI_EVENT_CONTAINER_STOPPED);
        assert_string_equal(ev.container_id, "c1");
        assert_string_equal(ev.sandbox_id, "sb1");
        assert_string_equal(ev.pod_uid, UID_A);
        assert_int_equal(ev.created_at_nsec, 42);
        cri_event_owner_free(owner);

        /* A sandbox already gone: no status, so no pod to name. */
        e.pod_sandbox_status = NULL;
        e.container_event_type = RUNTIME__V1__CONTAINER_EVENT_TYPE__CONTAINER_DELETED_EVENT;
        n = runtime__v1__container_event_response__pack(&e, buf);
        assert_int_equal(cri_event_decode(buf, n, &ev, &owner), 0);
        assert_int_equal(ev.type, CRI_EVENT_CONTAINER_DELETED);
        assert_null(ev.sandbox_id);
        assert_null(ev.pod_uid);
        cri_event_owner_free(owner);

        assert_int_equal(cri_event_decode(garbage, sizeof garbage, &ev, &owner), -EBADMSG);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_states_count_except_exited),
                cmocka_unit_test(test_grouped_sorted_distinct),
                cmocka_unit_test(test_sandbox_uid_wins_label_is_fallback),
                cmocka_unit_test(test_exited_container_in_ready_sandbox_counts),
                cmocka_unit_test(test_ready_sandbox_without_container_counts),
                cmocka_unit_test(test_notready_sandbox_with_exited_containers_does_not_count),
                cmocka_unit_test(test_unknown_sandbox_state_counts),
                cmocka_unit_test(test_garbage),
                cmocka_unit_test(test_event_decode),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
