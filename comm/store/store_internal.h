/* Private to comm/store/ (not a contract): the rendezvous store's wire format and the socket
 * helpers its server (server.c) and client (client.c) share (wire.c). The store's API is in
 * comm/comm.h. */
#ifndef TR_COMM_STORE_INTERNAL_H
#define TR_COMM_STORE_INTERNAL_H

#include "comm/comm.h"

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
/* tr_store_server_start() whose keys and values (plus 64 bytes per entry) may take at most
 * max_bytes (tr_store_server_start(): 512 MiB); for tests of the cap. */
TR_MUST_CHECK int store_server_start_capped(const char *bind_host, int port, const char *token,
                                            const char *session, int world_size,
                                            size_t max_bytes, tr_store_server **out);
TR_MUST_CHECK int store_write_all(int fd, const void *buf, size_t len, double deadline);
TR_MUST_CHECK int store_read_all(int fd, void *buf, size_t len, double deadline);

#endif
