/* SPDX-License-Identifier: Apache-2.0 */
/* The pure part of the CRI client: which pods have a container that is not
 * known to have exited, from the runtime's two lists. */
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
        size_t n_sb;
        Runtime__V1__Container ct[8];
        Runtime__V1__Container *ctp[8];
        Runtime__V1__Container__LabelsEntry lbl[8];
        Runtime__V1__Container__LabelsEntry *lblp[8];
        size_t n_ct;
} Lists;

static void sandbox(Lists *l, const char *id, const char *uid) {
        size_t i = l->n_sb++;
        runtime__v1__pod_sandbox__init(&l->sb[i]);
        runtime__v1__pod_sandbox_metadata__init(&l->md[i]);
        l->md[i].uid = (char *) uid;
        l->md[i].name = (char *) "p";
        l->sb[i].id = (char *) id;
        l->sb[i].metadata = &l->md[i];
        l->sbp[i] = &l->sb[i];
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

static char **running(Lists *l) {
        Runtime__V1__ListContainersResponse cr = RUNTIME__V1__LIST_CONTAINERS_RESPONSE__INIT;
        Runtime__V1__ListPodSandboxResponse sr = RUNTIME__V1__LIST_POD_SANDBOX_RESPONSE__INIT;
        uint8_t cb[4096], sbuf[4096];
        char **uids = NULL;

        cr.containers = l->ctp;
        cr.n_containers = l->n_ct;
        sr.items = l->sbp;
        sr.n_items = l->n_sb;
        size_t cn = runtime__v1__list_containers_response__pack(&cr, cb);
        size_t sn = runtime__v1__list_pod_sandbox_response__pack(&sr, sbuf);
        assert_int_equal(cri_running_pods(cb, cn, sbuf, sn, &uids), 0);
        return uids;
}

static void strv_free(char **v) {
        for (size_t i = 0; v && v[i]; i++)
                free(v[i]);
        free(v);
}

static void test_states_count_except_exited(void **state) {
        Lists l = {};
        sandbox(&l, "sa", UID_A);
        sandbox(&l, "sb", UID_B);
        sandbox(&l, "sc", UID_C);
        container(&l, "sa", RUNTIME__V1__CONTAINER_STATE__CONTAINER_EXITED, NULL);
        container(&l, "sb", RUNTIME__V1__CONTAINER_STATE__CONTAINER_CREATED, NULL);
        container(&l, "sc", RUNTIME__V1__CONTAINER_STATE__CONTAINER_UNKNOWN, NULL);
        char **u = running(&l);
        assert_string_equal(u[0], UID_B);
        assert_string_equal(u[1], UID_C);
        assert_null(u[2]);
        strv_free(u);
}

static void test_grouped_sorted_distinct(void **state) {
        Lists l = {};
        sandbox(&l, "sb", UID_B);
        sandbox(&l, "sa", UID_A);
        container(&l, "sb", RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING, NULL);
        container(&l, "sa", RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING, NULL);
        container(&l, "sb", RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING, NULL);
        container(&l, "sa", RUNTIME__V1__CONTAINER_STATE__CONTAINER_EXITED, NULL);
        char **u = running(&l);
        assert_string_equal(u[0], UID_A);
        assert_string_equal(u[1], UID_B);
        assert_null(u[2]);
        strv_free(u);
}

static void test_sandbox_uid_wins_label_is_fallback(void **state) {
        Lists l = {};
        /* A sandbox with no container is no running container. */
        sandbox(&l, "sa", UID_A);
        sandbox(&l, "sb", UID_B);
        /* The sandbox's metadata.uid names the pod, whatever the label says. */
        container(&l, "sb", RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING, UID_A);
        /* Sandbox gone between the calls: the label, when there is one. */
        container(&l, "gone", RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING, UID_C);
        container(&l, "gone2", RUNTIME__V1__CONTAINER_STATE__CONTAINER_RUNNING, NULL);
        char **u = running(&l);
        assert_string_equal(u[0], UID_B);
        assert_string_equal(u[1], UID_C);
        assert_null(u[2]);
        strv_free(u);
}

static void test_garbage(void **state) {
        static const uint8_t bad[] = { 0x0a, 0x80 };
        char **u = NULL;
        assert_int_equal(cri_running_pods(bad, sizeof bad, NULL, 0, &u), -EBADMSG);
        assert_null(u);
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
                cmocka_unit_test(test_garbage),
                cmocka_unit_test(test_event_decode),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
