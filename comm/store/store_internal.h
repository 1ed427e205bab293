/* Private to comm/store/ (not a contract to the rest of trident): the rendezvous store's wire
 * format and the socket helpers its server and client (client.c) share (wire.c); the server's
 * limits, key table (table.c) and connection state (server.c: the poll loop, start/stop;
 * conn.c: a connection's I/O and deadlines; request.c: what a request does). The store's API
 * is in comm/comm.h. */
#ifndef TR_COMM_STORE_INTERNAL_H
#define TR_COMM_STORE_INTERNAL_H

#include "comm/comm.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

enum {
    STORE_OP_HELLO = 1,
    STORE_OP_SET = 2,
    STORE_OP_GET = 3,
    STORE_OP_ADD = 4,
    STORE_OP_WAIT = 5,
    STORE_OP_CHECK = 6,
};
/* STORE_ABORTED: the rendezvous was stopped (a rank refused for another job's identity or
 * another world size before every rank joined); the payload says why. */
enum { STORE_OK = 0, STORE_ERROR = 1, STORE_RETRY = 2, STORE_ABORTED = 3 };
#define STORE_MAGIC "TRS1"
#define STORE_REQ_HDR 13
#define STORE_RESP_HDR 5
/* HELLO's value: the session, then optionally a NUL and the client's claim: its rank and the
 * world size it was given (u32le each; rank 0xffffffff: not a rank of the job). */
#define STORE_CLAIM_LEN 8
#define STORE_NO_RANK 0xffffffffu

void store_put_u32(uint8_t *p, uint32_t v);
uint32_t store_get_u32(const uint8_t *p);
void store_put_i64(uint8_t *p, int64_t v);
int64_t store_get_i64(const uint8_t *p);
/* 1 if (op, key length, value length) is a well-formed request; else 0 and *why. */
int store_valid_request(uint8_t op, uint32_t klen, uint32_t vlen, const char **why);
TR_MUST_CHECK int store_write_all(int fd, const void *buf, size_t len, double deadline);
TR_MUST_CHECK int store_read_all(int fd, void *buf, size_t len, double deadline);

/* ---------------------------------------------------------------- the server's limits */

/* What tr_store_server_start() uses; tests start servers with smaller ones. A field left 0
 * takes the default. */
#define STORE_MAX_TOTAL_BYTES ((size_t)512 << 20)
#define STORE_MAX_UNAUTH 1024 /* connections without a good HELLO yet; the oldest makes room */
/* A connection must pass its HELLO within this long of being accepted. */
#define STORE_HELLO_TIMEOUT_S 10.0
/* A request (header, key and value) must arrive whole within this long of its first byte:
 * a peer that stalls in the middle of one is dropped, so it cannot hold its connection and up
 * to 1 MiB of buffer for good. Clients write a request in one go; 10 s is 1 MiB at 100 KiB/s.
 * A request received whole (a GET/WAIT parked on a missing key included) is not timed. */
#define STORE_REQUEST_TIMEOUT_S 10.0
typedef struct {
    size_t max_bytes;         /* keys, values and 64 bytes per entry; 0: STORE_MAX_TOTAL_BYTES */
    double hello_timeout_s;   /* > 0, or 0: STORE_HELLO_TIMEOUT_S */
    double request_timeout_s; /* > 0, or 0: STORE_REQUEST_TIMEOUT_S */
} store_server_options;

/* tr_store_server_start() with these limits (opts NULL: the defaults). */
TR_MUST_CHECK int store_server_start_with(const char *bind_host, int port, const char *token,
                                          const char *session, int world_size,
                                          const store_server_options *opts,
                                          tr_store_server **out);

/* ---------------------------------------------------------------- the key table (table.c) */

#define STORE_NBUCKETS 1024
#define STORE_ENTRY_OVERHEAD 64 /* bytes charged per entry besides its key and value */

typedef struct store_entry {
    struct store_entry *next;
    char *key;
    uint8_t *value;
    size_t len;
} store_entry;

/* Keys hash with SipHash-2-4 under a seed drawn per table, so a peer cannot aim many keys at
 * one bucket without knowing it. Nothing the server says or logs depends on the buckets'
 * order: lookups go by key, and the table is only walked to free it. */
typedef struct {
    store_entry *buckets[STORE_NBUCKETS];
    uint64_t seed[2];
    size_t total_bytes, max_bytes; /* keys, values and STORE_ENTRY_OVERHEAD per entry */
} store_table;

/* An empty table capped at max_bytes, its seed from store_seed_draw(seed, 1). */
void store_table_init(store_table *t, size_t max_bytes);
void store_table_free(store_table *t);
store_entry *store_table_find(const store_table *t, const char *key);
/* Insert or replace (a copy of val); NULL with *why when over the cap or out of memory. */
store_entry *store_table_put(store_table *t, const char *key, const uint8_t *val, size_t len,
                             const char **why);
size_t store_table_bucket(const store_table *t, const char *key);
/* A 128-bit seed: from getrandom() (non-blocking) when use_getrandom and it answers; else
 * (ENOSYS on kernels before 3.17, or the pool not yet initialised at boot) the fallback:
 * both clocks' nanoseconds, the pid, a stack address (ASLR) and a per-process counter hashed
 * together, which differs per server and per process but is not secret from a local user
 * who can watch the process. Returns 1 if getrandom() gave it, 0 for the fallback. */
int store_seed_draw(uint64_t seed[2], int use_getrandom);
uint64_t store_siphash(const uint64_t key[2], const void *data, size_t len);

/* ---------------------------------------------------------------- the server (server.c,
 * connections and requests in conn.c and request.c) */

typedef struct {
    int fd;
    int authed;
    char peer[64]; /* "address:port" of the peer, for the log */
    double opened;          /* accepted at (tr_now()) */
    double request_started; /* the current request's first byte arrived at; with hdr_got > 0 */
    uint8_t hdr[STORE_REQ_HDR];
    size_t hdr_got; /* > 0: a request is being received (or was refused at its header) */
    uint8_t *body;  /* key then value */
    size_t body_len, body_got;
    uint8_t op;
    uint32_t klen, vlen;
    char *parked_key; /* GET/WAIT waiting for this key */
    uint8_t parked_op;
    uint8_t *out;
    size_t out_len, out_sent;
    int close_after_write;
} store_conn;

struct tr_store_server {
    int listen_fd, wake_pipe[2], port;
    char token[TR_STORE_MAX_KEY + 1], session[TR_STORE_MAX_KEY + 1];
    pthread_t thread;
    int running;
    store_table table;
    double hello_timeout_s, request_timeout_s;
    store_conn **conns; /* cap slots, nconns used */
    int nconns, cap;
    int n_unauth;         /* connections not authenticated yet */
    int world_size;       /* 0: not told; no claims checked */
    uint8_t *joined;      /* bit r: rank r has said hello */
    int n_joined;         /* distinct ranks joined; == world_size: formed */
    char aborted[512];    /* the reason the rendezvous was stopped, "" while it was not */
    double log_window;    /* start of the current window of dropped-peer warnings */
    int logged, unlogged; /* warnings printed in it, and those held back */
};

/* Warn that the connection from c's peer is dropped, and why (at most 20 lines per 10 s). */
void store_log_drop(tr_store_server *s, const store_conn *c, const char *why);

/* conn.c: one connection's I/O. -1: close the connection now. */
int store_conn_readable(tr_store_server *s, store_conn *c);
int store_conn_writable(store_conn *c);
/* When c must be dropped if nothing changes (no HELLO yet, or a request cut off midway), or
 * INFINITY. */
double store_conn_deadline(const tr_store_server *s, const store_conn *c);
/* 1 (with the reason, logged by the caller) if c is past its deadline at `now`. */
int store_conn_expired(const tr_store_server *s, const store_conn *c, double now, char *why,
                       size_t why_len);
/* Accept one pending connection (the oldest unauthenticated one makes room when full). */
void store_conn_accept(tr_store_server *s);
void store_conn_free(tr_store_server *s, store_conn *c);

/* request.c: a complete request in c->body, or a reply. */
void store_handle_request(tr_store_server *s, store_conn *c);
/* Queue a reply; 0, or -1 out of memory (the caller closes). */
int store_respond(store_conn *c, uint8_t status, const void *payload, size_t len);
/* Log the drop, queue an error reply naming msg, close once it is sent. */
void store_refuse(tr_store_server *s, store_conn *c, const char *msg);

#endif
