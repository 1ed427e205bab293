/* What a store request does, once received whole (private to comm/store/): HELLO checks the
 * job's token, session and rank claim (a rank of this world refused for another job's token,
 * or a rank claiming another world size, stops a forming rendezvous: every parked and later
 * request gets STORE_ABORTED with the reason); SET/ADD write the key table and answer the
 * connections parked on that key; GET/WAIT of a missing key park the connection; CHECK answers
 * at once. A refused request is logged (store_log_drop) and closes its connection only. */
#include "comm/store/store_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Queue a response; returns 0 or -1 (out of memory: caller closes). */
int store_respond(store_conn *c, uint8_t status, const void *payload, size_t len)
{
    size_t need = c->out_len + STORE_RESP_HDR + len;
    uint8_t *o = realloc(c->out, need);
    if (!o)
        return -1;
    c->out = o;
    o += c->out_len;
    o[0] = status;
    store_put_u32(o + 1, (uint32_t)len);
    if (len)
        memcpy(o + STORE_RESP_HDR, payload, len);
    c->out_len = need;
    return 0;
}

void store_refuse(tr_store_server *s, store_conn *c, const char *msg)
{
    store_log_drop(s, c, msg);
    store_respond(c, STORE_ERROR, msg, strlen(msg));
    c->close_after_write = 1;
}

static void respond_aborted(tr_store_server *s, store_conn *c)
{
    store_respond(c, STORE_ABORTED, s->aborted, strlen(s->aborted));
    c->close_after_write = 1;
}

static int formed(const tr_store_server *s)
{
    return s->world_size > 0 && s->n_joined == s->world_size;
}

/* Stop the rendezvous (the first reason is kept): every parked request is answered now. */
static void abort_rendezvous(tr_store_server *s, const char *why)
{
    if (s->aborted[0])
        return;
    snprintf(s->aborted, sizeof s->aborted, "%s", why);
    for (int i = 0; i < s->nconns; i++) {
        store_conn *c = s->conns[i];
        if (c && c->parked_key) {
            free(c->parked_key);
            c->parked_key = NULL;
            respond_aborted(s, c);
        }
    }
}

/* Answer a GET/WAIT on an existing entry. */
static void answer_lookup(store_conn *c, uint8_t op, const store_entry *e)
{
    if (op == STORE_OP_GET) {
        if (store_respond(c, STORE_OK, e->value, e->len))
            c->close_after_write = 1;
    } else {
        store_respond(c, STORE_OK, NULL, 0);
    }
}

static void wake_parked(tr_store_server *s, const store_entry *e)
{
    for (int i = 0; i < s->nconns; i++) {
        store_conn *c = s->conns[i]; /* NULL: dropped earlier in this poll round */
        if (c && c->parked_key && !strcmp(c->parked_key, e->key)) {
            answer_lookup(c, c->parked_op, e);
            free(c->parked_key);
            c->parked_key = NULL;
        }
    }
}

static int token_equal(const char *a, const char *b, size_t blen)
{
    size_t alen = strlen(a);
    unsigned diff = (unsigned)(alen != blen);
    for (size_t i = 0; i < blen; i++)
        diff |= (unsigned)(uint8_t)b[i] ^ (unsigned)(uint8_t)(i < alen ? a[i] : 0);
    return diff == 0;
}

/* HELLO: key = job token, value = session [NUL rank size]. */
static void hello(tr_store_server *s, store_conn *c)
{
    const uint8_t *val = c->body + c->klen, *nul = memchr(val, 0, c->vlen);
    size_t slen = nul ? (size_t)(nul - val) : c->vlen;
    uint32_t rank = STORE_NO_RANK, size = 0;
    if (nul) {
        if (c->vlen - slen - 1 != STORE_CLAIM_LEN) {
            store_refuse(s, c, "malformed hello");
            return;
        }
        rank = store_get_u32(nul + 1);
        size = store_get_u32(nul + 5);
    }
    uint32_t w = (uint32_t)s->world_size;
    int is_rank = rank != STORE_NO_RANK && w > 0;
    int of_world = is_rank && size == w && rank < w; /* a rank slot of this world */
    int slot_open = of_world && !(s->joined[rank / 8] & (1u << (rank % 8)));
    char why[256];
    if (!token_equal(s->token, (const char *)c->body, c->klen)) {
        /* a rank this world still waits for went to another job: it will not come here */
        if (slot_open && !formed(s)) {
            snprintf(why, sizeof why, "rank %u of %u presented another job's identity and was "
                                      "refused", rank, size);
            abort_rendezvous(s, why);
        }
        store_refuse(s, c, "another job's identity: the store at this address serves "
                                   "another job");
        return;
    }
    if (!token_equal(s->session, (const char *)val, slen)) {
        store_respond(c, STORE_RETRY, "session mismatch", 16);
        c->close_after_write = 1;
        return;
    }
    if (s->aborted[0]) {
        respond_aborted(s, c);
        return;
    }
    if (is_rank && !of_world) {
        if (!formed(s)) {
            snprintf(why, sizeof why, "rank %u says WORLD_SIZE=%u but this job has "
                                      "WORLD_SIZE=%u", rank, size, w);
            abort_rendezvous(s, why);
        }
        snprintf(why, sizeof why, "this rank (%u) says WORLD_SIZE=%u but the job's rank 0 has "
                                  "WORLD_SIZE=%u", rank, size, w);
        store_refuse(s, c, why);
        return;
    }
    if (slot_open) {
        s->joined[rank / 8] |= (uint8_t)(1u << (rank % 8));
        s->n_joined++;
    }
    c->authed = 1;
    s->n_unauth--;
    store_respond(c, STORE_OK, NULL, 0);
}

/* One complete request in c->body: answer it, or park it (GET/WAIT of a missing key). */
void store_handle_request(tr_store_server *s, store_conn *c)
{
    const char *kbytes = (const char *)c->body;
    const uint8_t *val = c->body + c->klen;
    if (c->op == STORE_OP_HELLO) {
        hello(s, c);
        return;
    }
    if (!c->authed) {
        store_refuse(s, c, "hello expected first");
        return;
    }
    if (s->aborted[0]) {
        respond_aborted(s, c);
        return;
    }
    if (memchr(kbytes, 0, c->klen)) {
        store_refuse(s, c, "key contains a NUL byte");
        return;
    }
    char key[TR_STORE_MAX_KEY + 1];
    memcpy(key, kbytes, c->klen);
    key[c->klen] = '\0';
    const char *why = NULL;
    store_entry *e;
    switch (c->op) {
    case STORE_OP_SET:
        e = store_table_put(&s->table, key, val, c->vlen, &why);
        if (!e) {
            store_respond(c, STORE_ERROR, why, strlen(why));
            return;
        }
        store_respond(c, STORE_OK, NULL, 0);
        wake_parked(s, e);
        return;
    case STORE_OP_ADD: {
        e = store_table_find(&s->table, key);
        int64_t cur = 0;
        if (e && e->len == 8)
            cur = store_get_i64(e->value);
        else if (e) {
            store_respond(c, STORE_ERROR, "add on a non-counter key", 24);
            return;
        }
        uint8_t buf[8];
        store_put_i64(buf, (int64_t)((uint64_t)cur + (uint64_t)store_get_i64(val)));
        e = store_table_put(&s->table, key, buf, 8, &why);
        if (!e) {
            store_respond(c, STORE_ERROR, why, strlen(why));
            return;
        }
        store_respond(c, STORE_OK, buf, 8);
        wake_parked(s, e);
        return;
    }
    case STORE_OP_CHECK: {
        uint8_t present = store_table_find(&s->table, key) != NULL;
        store_respond(c, STORE_OK, &present, 1);
        return;
    }
    case STORE_OP_GET:
    case STORE_OP_WAIT:
        e = store_table_find(&s->table, key);
        if (e) {
            answer_lookup(c, c->op, e);
        } else {
            c->parked_key = strdup(key);
            c->parked_op = c->op;
            if (!c->parked_key)
                store_refuse(s, c, "out of memory");
        }
        return;
    default:
        store_refuse(s, c, "unknown operation");
    }
}

